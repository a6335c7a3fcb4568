"""Build the anti-spoofing training/evaluation set into a cache directory outside the repository."""

from __future__ import annotations

import argparse
import csv
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np
import soundfile as sf

from train.antispoof_data.bonafide import bonafide_debian, bonafide_more, bonafide_shared
from train.antispoof_data.channels import CODECS, codec_chain
from train.antispoof_data.clips import DEFAULT_CACHE, EVAL_ONLY, SR, Clip, Raw, Spoof, read_manifest, rng_for
from train.antispoof_data.finishing import finish
from train.antispoof_data.real_sources import REAL_SOURCES, gen_real_sources, real_bonafide
from train.antispoof_data.replay import N_FAR_FIELD, N_REPLAY_PER_CONDITION, REPLAY, gen_far_field, gen_replay
from train.antispoof_data.tts import gen_espeak, gen_festival, gen_flite, gen_kokoro, gen_piper
from train.antispoof_data.vocoded import (
    N_GRIFFIN_LIM,
    N_HIFIGAN,
    N_LPC,
    N_LYRA,
    N_MLSA,
    N_WORLD,
    RESYNTH_FAMILIES,
    gen_griffin_lim,
    gen_lpc,
    gen_nii,
    gen_resynth,
    gen_world,
)

# The families added for issue 29 (train/spoof_families.py): the resynthesis families, flite and
# Kokoro TTS. Each is one generator, so leave-one-generator-out leaves the family out.
NEW_FAMILIES = (*RESYNTH_FAMILIES, "flite", "kokoro")


def _pick(pool: list[Raw], n: int, key: str) -> list[Raw]:
    rng = rng_for(key)
    idx = rng.choice(len(pool), size=min(n, len(pool)), replace=False)
    return [pool[i] for i in sorted(idx)]


def _write(
    cache: Path, sub: str, cid: str, wave: np.ndarray, finished: bool = True
) -> tuple[str, str, float]:
    y, channel = finish(wave, cid) if finished else (np.clip(wave, -1, 1).astype(np.float32), "as-published")
    rel = f"audio/{sub}/{cid}.flac"
    (cache / rel).parent.mkdir(parents=True, exist_ok=True)
    sf.write(cache / rel, y, SR, subtype="PCM_16")
    return rel, channel, y.size / SR


def _save_part(cache: Path, name: str, clips: list[Clip]) -> None:
    part = cache / "parts" / f"{name}.csv"
    part.parent.mkdir(parents=True, exist_ok=True)
    with open(part.with_suffix(".tmp"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Clip)])
        w.writeheader()
        for c in clips:
            w.writerow(asdict(c))
    part.with_suffix(".tmp").rename(part)


def _load_part(cache: Path, name: str) -> list[Clip] | None:
    part = cache / "parts" / f"{name}.csv"
    return read_manifest(part) if part.exists() else None


def _run_spoof_job(job: tuple[str, Path, list[Raw]]) -> list[Clip]:
    name, cache, pool = job
    done = _load_part(cache, name)
    if done is not None:
        print(f"  {name}: {len(done)} clips (already built)", flush=True)
        return done
    makers: dict[str, Callable[[], list[Spoof]]] = {
        "espeak": gen_espeak,
        "festival": gen_festival,
        "piper": gen_piper,
        "nii": gen_nii,
        "world": lambda: gen_world(pool),
        "griffin-lim": lambda: gen_griffin_lim(pool),
        "lpc-vocoder": lambda: gen_lpc(pool),
        "far-field": lambda: gen_far_field(pool),
        **{c: (lambda c=c: gen_replay(pool, c)) for c in REPLAY},
        "real-sources": gen_real_sources,
        "bonafide-more": bonafide_more,
        **{f: (lambda f=f: gen_resynth(pool, f)) for f in RESYNTH_FAMILIES},
        "flite": gen_flite,
        "kokoro": gen_kokoro,
    }
    clips = []
    for s in makers[name]():
        rel, ch, dur = _write(cache, f"{s.label}/{s.generator}", s.id, s.wave, name != "real-sources")
        clips.append(Clip(s.id, rel, s.label, s.generator, s.speaker, s.source, s.licence, 1, ch, dur))
    _save_part(cache, name, clips)
    print(f"  {name}: {len(clips)} clips", flush=True)
    return clips


def build(cache: Path, workers: int = 2, fresh: bool = False) -> list[Clip]:
    """Build every part missing from ``cache/parts`` (all of them with ``fresh``), then the manifest."""
    if fresh:
        shutil.rmtree(cache / "audio", ignore_errors=True)
        shutil.rmtree(cache / "parts", ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    shared = bonafide_shared()
    clips: list[Clip] = _load_part(cache, "bonafide") or []
    for r in [] if clips else [*shared, *bonafide_debian()]:
        gen = r.source.split()[1] if r.source.startswith("Debian") else r.source.split()[0]
        rel, ch, dur = _write(cache, f"bonafide/{gen}", r.id, r.wave)
        clips.append(Clip(r.id, rel, "bonafide", gen, r.speaker, r.source, r.licence, r.train_ok, ch, dur))
    _save_part(cache, "bonafide", clips)
    print(f"  bona fide: {len(clips)} clips", flush=True)
    # Derived spoofs only from bona fide the shipped model may be trained on, cut to <= 5 s.
    pool = [r for r in shared if r.train_ok and r.wave.size >= 2 * SR]
    sizes = {"world": N_WORLD, "griffin-lim": N_GRIFFIN_LIM, **dict.fromkeys(REPLAY, N_REPLAY_PER_CONDITION)}
    sizes["far-field"] = N_FAR_FIELD
    sizes["lpc-vocoder"] = N_LPC
    sizes |= {"lyra": N_LYRA, "hifigan-lj": N_HIFIGAN, "mlsa": N_MLSA}
    jobs = ["festival", "world", "griffin-lim", "espeak", "piper", "nii", *REPLAY, "far-field", "lpc-vocoder"]
    jobs += ["real-sources", "bonafide-more", *NEW_FAMILIES]
    close = [r for r in pool if not r.source.startswith("ami")]  # meeting audio is far-field already
    real_bona = real_bonafide()
    # Each derived generator gets its own seeded draw of sources (only those are sent to the worker);
    # the resynthesis families also get every real source's bona fide.
    args = [
        (
            j,
            cache,
            (_pick(close if j == "far-field" else pool, sizes[j], j) if j in sizes else [])
            + (real_bona if j in RESYNTH_FAMILIES else []),
        )
        for j in jobs
    ]
    with ProcessPoolExecutor(max_workers=workers) as ex:
        for part in ex.map(_run_spoof_job, args):
            clips += part
    clips += build_codec(cache, clips, workers)
    with open(cache / "manifest.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Clip)])
        w.writeheader()
        for c in clips:
            w.writerow(asdict(c))
    return clips


N_CODEC_OTHER = 1500  # codec copies of clips made here or of other bona fide (all real-source clips get one)


def _codec_job(job: tuple[Path, list[Clip]]) -> list[Clip]:
    cache, todo = job
    out = []
    for c in todo:
        rng = rng_for("codec/" + c.id)
        name = str(rng.choice(CODECS))
        x, _ = sf.read(cache / c.path, dtype="float32")
        y = np.clip(codec_chain(x, name, rng), -1, 1)
        cid = f"codec-{c.id}"
        rel = f"audio/codec/{c.label}/{cid}.flac"
        (cache / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(cache / rel, y, SR, subtype="PCM_16")
        out.append(replace(c, id=cid, path=rel, channel=f"{c.channel}+{name}", duration_s=y.size / SR))
    return out


def build_codec(cache: Path, clips: list[Clip], workers: int = 2) -> list[Clip]:
    """Codec and channel copies (:data:`CODECS`: MP3, Opus, GSM, A-/mu-law, a narrow-band codec
    stand-in, resampling chains, RawBoost-style noise) of every real-source clip and of a seeded
    draw of the other trainable clips, both classes alike, so that no codec is a class cue and
    compressed genuine speech is seen as bona fide. Part ``codec``."""
    done = _load_part(cache, "codec")
    if done is not None:
        print(f"  codec: {len(done)} clips (already built)", flush=True)
        return done
    real = [c for c in clips if c.source in REAL_SOURCES]
    rest = [c for c in clips if c.source not in REAL_SOURCES and c.train_ok and c.generator not in EVAL_ONLY]
    rng = rng_for("codec-draw")
    picked = [
        rest[i] for i in sorted(rng.choice(len(rest), size=min(N_CODEC_OTHER, len(rest)), replace=False))
    ]
    todo = real + picked
    jobs = [(cache, todo[k::workers]) for k in range(workers)]
    out: list[Clip] = []
    with ProcessPoolExecutor(max_workers=workers) as ex:
        for part in ex.map(_codec_job, jobs):
            out += part
    _save_part(cache, "codec", out)
    print(f"  codec: {len(out)} clips", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m train.antispoof_data", description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fresh", action="store_true", help="rebuild every part, not only the missing ones")
    args = ap.parse_args()
    clips = build(args.cache, args.workers, args.fresh)
    print(f"{len(clips)} clips in {args.cache / 'manifest.csv'}")
