"""Anti-spoofing training: an LCNN on spectrograms plus a cue branch, fused with three more branches, in ONNX.

The command line is ``python -m train.antispoof`` (``__main__``). Modules, by concern: ``split``
(speaker split, cached spectrogram features), ``features`` (utterance cues, CAM++ front output,
Whisper statistics), ``networks`` (the two networks and their training), ``fusion`` (the regression
branches, calibration, fusion weights, the fused ``Model``), ``export`` (ONNX), ``loso`` (leave one
source out), ``logo`` (leave one generator out), ``report`` (tables, card block, DET plot),
``baseline`` (LFCC-GMM) and ``pipeline`` (one whole run).

Steps (seeded: a rerun on the same cache gives the same split and, up to floating-point
non-determinism of multi-threaded CPU kernels, the same numbers):

1. Split by speaker (``split_of``): 25 % of the bona fide speakers, and every spoof made from their
   speech, are held out for testing; TTS voices and the NII/ARCTIC speakers, which have no bona fide
   side, are held out per generator (every 4th voice in a fixed hash order, at least one). Debian
   bona fide (Asterisk, KLettres) is never trained on (licence) and is an unseen-domain test set.
   One training speaker in six is set aside for validation (calibration). The generators of
   ``antispoof_data.EVAL_ONLY`` are left out entirely (``eval/antispoof.py`` scores them).
2. The network on the runtime front end (``verilive.voice.antispoof.features``, 1-4 s random crops,
   SpecAugment masks) and the runtime utterance cues (``verilive.voice.utterance_cues``, whole
   clip, cached in ``<cache>/cues.npz``), class-balanced sampling, one output per generator
   family (``subclass_of``). Beside it, a small network on the frozen CAM++ front output
   (``AntiSpoof.fcm_frames``, cached in ``<cache>/fcm_frames.npz``), trained on the same clips
   the same way, a logistic regression on that output's statistics over time (``fcm_stats``;
   which statistics: ``train.antispoof_stats_cv``) and one on the Whisper base encoder's layer
   statistics (cached in ``<cache>/whisper_<model>.npz``). On the validation clips each branch is
   calibrated alone; the bona fide score is the weighted sum of their log-odds, calibrated by one
   affine map, and the attack class split comes from their recalibrated summed log-probabilities
   (``Fusion``); everything is folded into one exported graph.
3. In-domain EER on the held-out speakers (whole clips), per class and per generator; rejection of
   the unseen-domain bona fide.
4. Leave-one-source-out (the figure that counts; ``loso.run_loso``): for each real source (a whole
   ``shared/data/voice`` folder of another lab, ``LOSO_SOURCES``) both networks and the regressions
   are trained without any clip of it (fewer epochs) and fused on the other sources' validation
   clips; its clips as published are scored against its own bona fide (or the pooled out-of-fold
   bona fide), with 1-2 s and 2-4 s crops and telephone-band and MP3 versions (``variant_data``).
   The fusion weights are learned on these out-of-source scores. The fold scores go to
   ``<cache>/loso_scores.npz`` (``eval/antispoof_loso.py`` reads them). ``--logo`` adds the older
   leave-one-generator-out over the generators made here.
5. ``--write``: src/verilive/voice/antispoof_model.onnx, the result tables into docs/antispoof.md
   (between its result markers) and ``<cache>/results.md``, and a DET plot, docs/antispoof_det.png
   (drawn, not kept in the repository: the card shows ``eval/antispoof.py``'s).

Every EER is ``common.metrics.eer`` (interpolated between the two operating points around the
crossing). The LFCC-GMM baseline (``--gmm-baseline``: 20 LFCC + deltas, 64-component diagonal GMM
per class, calibrated on out-of-fold scores) is kept for comparison; it is not shipped.
"""
