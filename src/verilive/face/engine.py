"""Face liveness engine: image -> validation -> liveness score (no HTTP; docs/face.md).

One image goes through: decode (EXIF honoured, header checked before pixels) -> CenterFace
detection -> validation in a fixed order of precedence -> the pipeline's branches on their crops of
the largest face (MiniFASNetV2 at 2.7x the box, MiniFASNetV1SE at 4x, the face-only branch at
1.1x, the EfficientNet-Lite0 backbone branch at 1.5x; a branch no pipeline's fusion reads is not
run) -> their live log-odds fused by the
pipeline's logistic regression and guard (face/fusion.py) into a raw ``score`` -> ``probability``
= sigmoid(score + calibration offset), and ``quality`` from face size, sharpness, exposure, pose
and occlusion.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum

import cv2
import numpy as np

from verilive.config import Settings
from verilive.face.backbone import BackbonePAD
from verilive.face.burst import BurstCheck, BurstChecker
from verilive.face.detector import Face, FaceDetector
from verilive.face.facepad import FacePAD
from verilive.face.fusion import PipelineFusion, load_fusion
from verilive.face.image import DecodedImage, ImageError, decode_image
from verilive.face.mesh import FaceMesh
from verilive.face.minifasnet import V1SE, V2, MiniFASNet, retinaface_like_box
from verilive.face.motion3d import SeriesMode, series_counts_against
from verilive.face.occlusion import OcclusionModel
from verilive.face.pipelines import DEFAULT_PIPELINE, Calibration, Domain
from verilive.face.quality import quality_factors
from verilive.models.sessions import ModelRegistry
from verilive.numeric import logit, sigmoid

__all__ = [
    "Assessment",
    "ErrorCode",
    "FaceEngine",
    "ImageResult",
    "Rejection",
    "Validation",
]


class ErrorCode(StrEnum):
    """Rejection reasons, in order of precedence for validation (docs/face.md#validation)."""

    FACE_NOT_FOUND = "FACE_NOT_FOUND"
    TOO_MANY_FACES = "TOO_MANY_FACES"
    FACE_TOO_SMALL = "FACE_TOO_SMALL"
    FACE_CROPPED = "FACE_CROPPED"
    FACE_CLOSE_TO_BORDER = "FACE_CLOSE_TO_BORDER"
    FACE_ANGLE_TOO_LARGE = "FACE_ANGLE_TOO_LARGE"
    FACE_IS_OCCLUDED = "FACE_IS_OCCLUDED"
    IMAGE_TOO_SMALL = "IMAGE_TOO_SMALL"
    # Input that cannot be used at all.
    FAILED_TO_READ_IMAGE = "FAILED_TO_READ_IMAGE"
    INVALID_META = "INVALID_META"


# Branch names of face/fusion.py -> the MiniFASNet model id each runs.
MINIFASNET_BRANCHES = {"minifasnet_v2": V2, "minifasnet_v1se": V1SE}
# Branches that cost as much as the rest together (EfficientNet-Lite0: ~13-16 ms a crop on one core,
# the MiniFASNets and the face-only model ~5 ms together): for one image it runs on a second core.
HEAVY_BRANCHES = frozenset({"backbone"})
# Images of a batch whose crops go through the models together.
CHUNK = 32
# A face whose roll is beyond the limit is looked for again in the image turned by these (OpenCV
# rotate codes): photos re-encoded without their EXIF orientation show a face lying on its side.
QUARTER_TURNS = (cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_90_COUNTERCLOCKWISE, cv2.ROTATE_180)
_TURNS = {cv2.ROTATE_90_CLOCKWISE: 1, cv2.ROTATE_180: 2, cv2.ROTATE_90_COUNTERCLOCKWISE: 3}  # clockwise
# A turn is taken only if it leaves the face within this share of the roll limit. The landmark roll
# is rough at large angles (a head tilted 50 degrees, turned by 90, reads 22): a tilted head must
# stay FACE_ANGLE_TOO_LARGE, while a face on its side turned upright reads under 15 (tests).
UPRIGHT_ROLL_SHARE = 0.5
# A series (or capture burst) that the 3D check from motion holds against liveness (judged flat; with
# series in ``use`` also turned but not rigid; under ``require`` anything but 3D) is a spoof whatever
# the appearance models say (docs/motion3d.md): its score is at most this, a probability under 1e-4
# with any calibration offset.
FLAT_SCORE = -10.0


@dataclass(frozen=True)
class Validation:
    """Thresholds of the validation codes; every one is a setting (README configuration table)."""

    min_face_px: float = 60.0
    min_face_relative: float = 0.08
    min_interpupillary_px: float = 20.0
    secondary_face_relative: float = 0.4
    cropped_fraction: float = 0.1
    # Issue 47, measured on 30 live collections (docs/face.md): faces up to the edge and turned up to 35
    # degrees are judged as well as the rest; a face reaching past the edge is not (the wide crops).
    border_margin: float = 0.0
    max_yaw: float = 35.0
    max_pitch: float = 25.0
    max_roll: float = 30.0
    occlusion_threshold: float = 0.5
    min_image_side: int = 240

    @classmethod
    def from_settings(cls, s: Settings) -> Validation:
        return cls(
            min_face_px=s.face_min_face_px,
            min_face_relative=s.face_min_face_relative,
            min_interpupillary_px=s.face_min_interpupillary_px,
            secondary_face_relative=s.face_secondary_face_relative,
            cropped_fraction=s.face_cropped_fraction,
            border_margin=s.face_border_margin,
            max_yaw=s.face_max_yaw,
            max_pitch=s.face_max_pitch,
            max_roll=s.face_max_roll,
            occlusion_threshold=s.face_occlusion_threshold,
            min_image_side=s.face_min_image_side,
        )

    def for_domain(self, domain: Domain) -> Validation:
        """DESKTOP: webcams at arm's length give smaller faces nearer the frame edge, so the relative
        size and border rules are halved; absolute size, pose and occlusion rules stay."""
        if domain is Domain.DESKTOP:
            return replace(
                self, min_face_relative=self.min_face_relative / 2, border_margin=self.border_margin / 2
            )
        return self


@dataclass
class ImageResult:
    """The outcome for one image: values, or a rejection."""

    score: float | None = None  # raw log-odds of the pipeline, before calibration
    probability: float | None = None
    quality: float | None = None
    error: str | None = None
    error_code: str | None = None
    width: int | None = None
    height: int | None = None
    latency_ms: float = 0.0
    details: dict[str, float] = field(default_factory=dict)
    # The 3D check from motion on a series: "3d", "flat" or "cannot_judge"; None when it did not run.
    motion3d: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code is None and self.error is None

    @classmethod
    def rejected(cls, code: ErrorCode, message: str, image: DecodedImage | None = None) -> ImageResult:
        return cls(
            error=message,
            error_code=code.value,
            width=image.width if image else None,
            height=image.height if image else None,
        )


@dataclass(frozen=True)
class _Checked:
    """A validated face, ready for the models: its crop for each branch, cut while the image was in
    memory, so that a batch never holds more decoded images than the pool has workers."""

    width: int
    height: int
    face: Face
    crops: dict[str, np.ndarray]  # branch -> its uint8 BGR crop
    quality: float
    details: dict[str, float]
    quarter_turns: int = 0


@dataclass(frozen=True)
class Rejection:
    """Why an image cannot be judged: a validation code and a message for people."""

    code: ErrorCode
    message: str
    # FACE_TOO_SMALL only: the face is big enough in pixels but too small for the image (the capture
    # spec has its own message for that case).
    relative_only: bool = False


@dataclass(frozen=True)
class Assessment:
    """Everything the face engine finds in one image: the public answer of :meth:`FaceEngine.assess`.

    ``image`` is the decoded image (EXIF orientation applied), None when it cannot be decoded; the
    face, quality and ``score`` (the pipeline's raw live log-odds, before any calibration) are
    None when the image is rejected or was not scored. ``quarter_turns`` tells how the image was
    turned to find the face upright (0 when it already was; see QUARTER_TURNS).
    """

    image: DecodedImage | None
    rejection: Rejection | None = None
    face: Face | None = None
    quality: float | None = None
    score: float | None = None
    details: dict[str, float] = field(default_factory=dict)
    quarter_turns: int = 0

    @property
    def ok(self) -> bool:
        return self.rejection is None


# Where a whole face lies, from its landmarks, in units of d = max(eye distance, 0.9 x eye-to-mouth
# distance) (the eye distance alone shrinks with yaw): d either side of the eye midpoint, d above
# the eyes and 0.8 d below the mouth. Measured on frontal portraits, where it matches the box.
EXTENT_SIDE, EXTENT_UP, EXTENT_DOWN = 1.0, 1.0, 0.8


def face_extent(face: Face) -> tuple[float, float, float, float]:
    """The face's full extent: the detector box joined with the landmark-based box. CenterFace keeps
    its box inside the image, but its landmarks still say where the cut-off part of a face is."""
    lm = np.asarray(face.landmarks, dtype=np.float64)
    eyes = (lm[0] + lm[1]) / 2.0
    mouth = (lm[3] + lm[4]) / 2.0
    d = max(float(np.hypot(*(lm[1] - lm[0]))), 0.9 * float(np.hypot(*(mouth - eyes))), 1.0)
    x1, y1, x2, y2 = face.box
    return (
        min(x1, eyes[0] - EXTENT_SIDE * d),
        min(y1, eyes[1] - EXTENT_UP * d),
        max(x2, eyes[0] + EXTENT_SIDE * d),
        max(y2, mouth[1] + EXTENT_DOWN * d),
    )


def face_xywh(face: Face) -> tuple[int, int, int, int]:
    """The box the models' crop rule expects: the CenterFace box mapped to a RetinaFace-like one
    (the models were trained on RetinaFace boxes; docs/model-minifasnet.md)."""
    return retinaface_like_box(face.box)


class FaceEngine:
    """Thread-safe: sessions are shared, no per-call state on ``self``."""

    def __init__(
        self,
        detector: FaceDetector,
        models: dict[str, MiniFASNet],
        facepad: FacePAD,
        fusion: dict[str, PipelineFusion] | None = None,
        validation: Validation = Validation(),
        max_pixels: int = 40_000_000,
        workers: int = 2,
        burst: BurstChecker | None = None,
        backbone: BackbonePAD | None = None,
        motion3d_mode: SeriesMode = "use",
        occlusion: OcclusionModel | None = None,
    ) -> None:
        self.detector = detector
        # Default: the packaged model (a small file; loading it again costs little).
        self.occlusion = occlusion if occlusion is not None else OcclusionModel.load()
        # The 3D check from motion (series and capture bursts); None: no check can run.
        self.burst = burst
        # How series use it (VERILIVE_FACE_MOTION3D): off, use (flat or turned-not-rigid caps the
        # score) or require (anything but 3D caps it; without a checker every series is capped).
        self.motion3d_mode: SeriesMode = motion3d_mode
        self.models = models
        self.facepad = facepad
        self.backbone = backbone
        self.fusion = fusion if fusion is not None else load_fusion()
        # Crops are cut only for the branches some pipeline reads.
        self.branches = sorted({b for f in self.fusion.values() for b in f.needs})
        if "backbone" in self.branches and backbone is None:
            raise ValueError("a face pipeline needs the backbone branch, but no backbone was given")
        self.validation = validation
        self.max_pixels = max_pixels
        self.workers = max(1, workers)
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="face")

    @classmethod
    def from_registry(cls, registry: ModelRegistry, settings: Settings) -> FaceEngine:
        fusion = load_fusion()
        needs = {b for f in fusion.values() for b in f.needs}
        detector = FaceDetector.from_registry(registry)
        # The capture service runs its bursts through this engine's checker too (capture/engine.py).
        wanted = settings.face_motion3d != "off" or settings.capture_motion3d != "off"
        burst = BurstChecker(detector, FaceMesh.from_registry(registry)) if wanted else None
        return cls(
            detector,
            {m: MiniFASNet.from_registry(registry, m) for m in (V2, V1SE)},
            FacePAD.load(),
            fusion,
            validation=Validation.from_settings(settings),
            max_pixels=settings.face_max_image_pixels,
            burst=burst,
            backbone=BackbonePAD.from_registry(registry) if "backbone" in needs else None,
            motion3d_mode=settings.face_motion3d,
            occlusion=OcclusionModel.load(),
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ validation

    def _validate(self, image: DecodedImage, domain: Domain) -> _Checked | Rejection:
        """The face to judge, or the first rejection in the order of :class:`ErrorCode`."""
        v = self.validation.for_domain(domain)
        img = image.bgr
        faces = self.detector.detect(img)
        turns = 0
        if faces and abs(faces[0].roll) > v.max_roll:
            img, faces, turns = self._upright(img, faces, v.max_roll)
        h, w = img.shape[:2]
        if not faces:
            return Rejection(ErrorCode.FACE_NOT_FOUND, "No face was found in the image")
        face = faces[0]  # largest first
        others = [f for f in faces[1:] if f.height >= v.secondary_face_relative * face.height]
        if others:
            return Rejection(
                ErrorCode.TOO_MANY_FACES,
                f"{1 + len(others)} faces were found; the image must show one person",
            )
        # Pixel sizes in the image as sent: a sparse JPEG is decoded scaled down (face/image.py).
        scale = image.reduction
        ipd, face_px = face.interpupillary_distance * scale, face.height * scale
        absolute = face_px < v.min_face_px or ipd < v.min_interpupillary_px
        if absolute or face.height < v.min_face_relative * h:
            return Rejection(
                ErrorCode.FACE_TOO_SMALL,
                f"The face is too small: {face_px:.0f} px high ({face.height / h:.0%} of the image), "
                f"{ipd:.0f} px between the eyes; at least {v.min_face_px:.0f} px, "
                f"{v.min_face_relative:.0%} and {v.min_interpupillary_px:.0f} px are needed",
                relative_only=not absolute,
            )
        x1, y1, x2, y2 = face_extent(face)
        fw, fh = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
        out_x = (max(0.0, -x1) + max(0.0, x2 - w)) / fw
        out_y = (max(0.0, -y1) + max(0.0, y2 - h)) / fh
        if max(out_x, out_y) > v.cropped_fraction:
            return Rejection(ErrorCode.FACE_CROPPED, "The face is cut off by the edge of the image")
        margin = min(x1 / fw, (w - x2) / fw, y1 / fh, (h - y2) / fh)
        if margin < v.border_margin:
            return Rejection(
                ErrorCode.FACE_CLOSE_TO_BORDER,
                "The face is too close to the edge of the image; centre it with some space around it",
            )
        if abs(face.yaw) > v.max_yaw or abs(face.pitch) > v.max_pitch or abs(face.roll) > v.max_roll:
            return Rejection(
                ErrorCode.FACE_ANGLE_TOO_LARGE,
                f"The head is turned too far (yaw {face.yaw:.0f}, pitch {face.pitch:.0f}, "
                f"roll {face.roll:.0f} degrees; at most {v.max_yaw:.0f}, {v.max_pitch:.0f}, "
                f"{v.max_roll:.0f})",
            )
        occ = self.occlusion.check(img, face.landmarks, threshold=v.occlusion_threshold)
        if occ.occluded:
            return Rejection(ErrorCode.FACE_IS_OCCLUDED, f"The face is covered (most at: {occ.worst})")
        if min(image.width, image.height) < v.min_image_side:
            return Rejection(
                ErrorCode.IMAGE_TOO_SMALL,
                f"The image is {image.width}x{image.height}; its shorter side must be at least "
                f"{v.min_image_side} px",
            )
        q = quality_factors(
            img,
            face.box,
            face.landmarks,
            face.yaw,
            face.pitch,
            face.roll,
            occ.score,
            min_interpupillary_px=v.min_interpupillary_px / scale,
        )
        details = {
            "face_score": face.score,
            "yaw": face.yaw,
            "pitch": face.pitch,
            "roll": face.roll,
            "occlusion": occ.score,
            "quality_size": q.size,
            "quality_sharpness": q.sharpness,
            "quality_exposure": q.exposure,
            "quality_pose": q.pose,
            "quality_occlusion": q.occlusion,
        }
        box = face_xywh(face)
        crops = {branch: self.models[mid].crop(img, box) for branch, mid in MINIFASNET_BRANCHES.items()}
        crops["facepad"] = self.facepad.crop(img, face.box)
        if self.backbone is not None and "backbone" in self.branches:
            crops["backbone"] = self.backbone.crop(img, face.box)
        return _Checked(image.width, image.height, face, crops, float(q.overall), details, turns)

    def _upright(
        self, img: np.ndarray, faces: list[Face], max_roll: float
    ) -> tuple[np.ndarray, list[Face], int]:
        """The image turned by the quarter turn under which its largest face is upright (roll within
        UPRIGHT_ROLL_SHARE of ``max_roll``), with that turn's faces; unchanged when no turn does."""
        best: tuple[float, np.ndarray, list[Face], int] | None = None
        limit = UPRIGHT_ROLL_SHARE * max_roll
        for turn in QUARTER_TURNS:
            turned = cv2.rotate(img, turn)
            found = self.detector.detect(turned)
            if found and abs(found[0].roll) <= limit and (best is None or abs(found[0].roll) < best[0]):
                best = (abs(found[0].roll), turned, found, _TURNS[turn])
        if best is None:
            return img, faces, 0
        return best[1], best[2], best[3]

    def assess(
        self,
        data: bytes,
        pipeline: str = DEFAULT_PIPELINE,
        domain: Domain = Domain.GENERAL,
        *,
        score: bool = True,
    ) -> Assessment:
        """Decode, validate and judge one image (``score`` False: stop before the liveness models).

        The public path of the face engine: /check_liveness takes the same steps (:meth:`_prepare`,
        then :meth:`raw_scores` in batches), so one image gets one answer whichever service asks.
        Never raises for bad input: an undecodable image gives ``image=None`` and a
        FAILED_TO_READ_IMAGE rejection.
        """
        image, checked = self._prepare(data, domain)
        if isinstance(checked, Rejection):
            return Assessment(image, checked)
        raw = float(self._scores_in_parallel([checked], pipeline)[0]) if score else None
        return Assessment(
            image, None, checked.face, checked.quality, raw, checked.details, checked.quarter_turns
        )

    def _prepare(self, data: bytes, domain: Domain) -> tuple[DecodedImage | None, _Checked | Rejection]:
        try:
            image = decode_image(data, self.max_pixels)
        except ImageError as exc:
            return None, Rejection(ErrorCode.FAILED_TO_READ_IMAGE, exc.message)
        return image, self._validate(image, domain)

    # ------------------------------------------------------------------ liveness

    def offset(self, pipeline: str, calibration: Calibration) -> float:
        """The log-odds added to ``pipeline``'s raw score before the sigmoid under ``calibration``."""
        return self.fusion[pipeline].offsets[calibration]

    def branch_scores(self, checked: Sequence[_Checked], branches: Sequence[str]) -> dict[str, np.ndarray]:
        """Live log-odds of each named branch for each checked image (one batched run per model)."""
        logits: dict[str, np.ndarray] = {}

        def minifasnet(b: str) -> np.ndarray:
            if b not in logits:
                crops = np.stack([c.crops[b] for c in checked])
                logits[b] = self.models[MINIFASNET_BRANCHES[b]].logits(crops)
            return logits[b]

        out: dict[str, np.ndarray] = {}
        for b in branches:
            if b in MINIFASNET_BRANCHES:
                out[b] = MiniFASNet.live_log_odds(minifasnet(b))
            elif b == "minifasnet_mean":
                # The engine's score before the face-only branch: logit of the mean live probability.
                p = [MiniFASNet.live_probability(minifasnet(m)) for m in MINIFASNET_BRANCHES]
                out[b] = logit(np.mean(p, axis=0))
            elif b == "facepad":
                out[b] = self.facepad.live_log_odds(np.stack([c.crops[b] for c in checked]))
            elif b == "backbone" and self.backbone is not None:
                out[b] = self.backbone.live_log_odds(np.stack([c.crops[b] for c in checked]))
            else:
                raise ValueError(f"unknown face branch {b!r}")
        return out

    def raw_scores(self, checked: Sequence[_Checked], pipeline: str) -> np.ndarray:
        """Raw live log-odds of each checked image under ``pipeline``: its branches' log-odds fused
        by the pipeline's logistic regression (face/fusion.py)."""
        if not checked:
            return np.zeros(0)
        fusion = self.fusion[pipeline]
        return fusion.fuse(self.branch_scores(checked, fusion.needs))

    def _scores_in_parallel(self, checked: list[_Checked], pipeline: str) -> np.ndarray:
        """:meth:`raw_scores`, the batch split across the pool's workers (each session runs on one
        intra-op thread, so two halves keep both cores busy). A batch too small to split (one image)
        runs its heaviest branch on the pool while this thread runs the others. Never call this from
        a pool worker: it waits on the pool."""
        workers = self.workers
        if not checked:
            return np.zeros(0)
        if len(checked) < 2 * workers:
            fusion = self.fusion[pipeline]
            heavy = [b for b in fusion.needs if b in HEAVY_BRANCHES]
            if workers < 2 or not heavy:
                return self.raw_scores(checked, pipeline)
            rest = [b for b in fusion.needs if b not in heavy]
            pending = self._pool.submit(self.branch_scores, checked, heavy)
            scores = self.branch_scores(checked, rest)
            scores.update(pending.result())
            return fusion.fuse(scores)
        step = -(-len(checked) // workers)
        parts = [checked[i : i + step] for i in range(0, len(checked), step)]
        return np.concatenate(list(self._pool.map(lambda part: self.raw_scores(part, pipeline), parts)))

    def check_images(
        self,
        images: Sequence[bytes],
        pipeline: str = DEFAULT_PIPELINE,
        calibration: Calibration = Calibration.REGULAR,
        domain: Domain = Domain.GENERAL,
    ) -> list[ImageResult]:
        """One result per image (a batch). Decoding, detection and validation run on the pool; the
        models then run once per model on the crops of each chunk of ``CHUNK`` images. Only the pool's
        workers hold decoded images (one each), however large the batch."""
        t0 = time.perf_counter()
        offset = self.offset(pipeline, calibration)
        out: list[ImageResult] = []
        for c0 in range(0, len(images), CHUNK):
            prepared = list(self._pool.map(lambda d: self._prepare(d, domain), images[c0 : c0 + CHUNK]))
            checked = [p for _, p in prepared if isinstance(p, _Checked)]
            it = iter(self._scores_in_parallel(checked, pipeline))
            for image, p in prepared:
                if isinstance(p, Rejection):
                    out.append(ImageResult.rejected(p.code, p.message, image))
                    continue
                s = float(next(it))
                out.append(
                    ImageResult(
                        score=s,
                        probability=sigmoid(s + offset),
                        quality=p.quality,
                        width=p.width,
                        height=p.height,
                        details=p.details,
                    )
                )
        per_image = 1000.0 * (time.perf_counter() - t0) / max(1, len(images))
        for r in out:
            r.latency_ms = per_image
        return out

    def check(
        self,
        data: bytes,
        pipeline: str = DEFAULT_PIPELINE,
        calibration: Calibration = Calibration.REGULAR,
        domain: Domain = Domain.GENERAL,
    ) -> ImageResult:
        return self.check_images([data], pipeline, calibration, domain)[0]

    def motion3d(self, images: Sequence[bytes]) -> BurstCheck:
        """The 3D check from motion on encoded frames of one face (docs/motion3d.md); skipped, with
        the reason, when this engine has no burst checker."""
        if self.burst is None:
            return BurstCheck(None, "the 3D check is off")
        return self.burst.check_encoded(images, self.max_pixels)

    def check_series(
        self,
        images: Sequence[bytes],
        pipeline: str = DEFAULT_PIPELINE,
        calibration: Calibration = Calibration.REGULAR,
        domain: Domain = Domain.GENERAL,
    ) -> ImageResult:
        """One result for a series of frames of one capture: the mean raw log-odds and the mean
        quality of the frames that pass validation; frames that fail are skipped. If none passes,
        the first frame's rejection is the answer.

        A series of 3 or more frames also goes through the 3D check from motion, unless
        ``motion3d_mode`` is off. With ``use``, a series judged flat, or one that turned in a way
        neither a plane nor a rigid head explains, gets a score of at most FLAT_SCORE; judged 3D or
        without enough turn, the score is unchanged (a screen replay of a moving face is 3D in
        content, so 3D is no evidence of life). With ``require``, only a series judged 3D keeps its
        score: no turn, not one face, or fewer than 3 frames give at most FLAT_SCORE."""
        results = self.check_images(images, pipeline, calibration, domain)
        good = [r for r in results if r.ok and r.score is not None]
        if not good:
            return results[0]
        score = float(np.mean([r.score for r in good]))
        details = {"frames": float(len(results)), "frames_used": float(len(good))}
        t0 = time.perf_counter()
        mode = self.motion3d_mode
        if mode == "off":
            motion = BurstCheck(None, "the 3D check is off for series")
        elif len(images) < 3:
            motion = BurstCheck(None, "fewer than 3 frames")
        else:
            motion = self.motion3d(images)
        verdict = None
        if motion.result is not None:
            verdict = motion.result.verdict.value
            details.update(motion.result.as_details())
        if series_counts_against(motion.result, mode):
            score = min(score, FLAT_SCORE)
            details["motion3d_capped"] = 1.0
        first = good[0]
        return ImageResult(
            score=score,
            probability=sigmoid(score + self.offset(pipeline, calibration)),
            quality=float(np.mean([r.quality for r in good if r.quality is not None])),
            width=first.width,
            height=first.height,
            latency_ms=sum(r.latency_ms for r in results) + 1000.0 * (time.perf_counter() - t0),
            details=details,
            motion3d=verdict,
        )
