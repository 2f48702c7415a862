"""The picture the image fixture scripts encode: smooth waves plus noise, so that every band of
coefficients (DCT or wavelet) carries detail."""
import numpy as np


def picture(rng, w, h, channels):
    y, x = np.mgrid[0:h, 0:w]
    planes = [
        128 + 100 * np.sin(x / (3 + k) + y / (5 + 2 * k)) + rng.normal(0, 25, (h, w))
        for k in range(channels)
    ]
    return np.stack(planes, -1).clip(0, 255).astype(np.uint8)
