"""Draws demo/www/sample.png, the demo's bundled picture: asymmetric on purpose (a sun on the
left, text, an arrow pointing right) so that crops and flips are easy to see. Needs Pillow."""
import math
import pathlib

from PIL import Image, ImageDraw, ImageFont

W, H = 384, 256
img = Image.new("RGBA", (W, H))
px = img.load()
for y in range(H):
    for x in range(W):
        t = y / (H - 1)
        px[x, y] = (int(40 + 120 * t), int(90 + 100 * t), int(200 - 40 * t), 255)
d = ImageDraw.Draw(img)
d.ellipse((36, 28, 108, 100), fill=(255, 214, 64, 255))
for k in range(12):
    a = k * math.pi / 6
    d.line((72 + 44 * math.cos(a), 64 + 44 * math.sin(a), 72 + 60 * math.cos(a), 64 + 60 * math.sin(a)),
           fill=(255, 214, 64, 255), width=4)
d.polygon([(0, 200), (90, 120), (170, 190), (250, 100), (384, 210), (384, 256), (0, 256)], fill=(46, 120, 70, 255))
d.polygon([(250, 100), (275, 124), (232, 118)], fill=(240, 240, 250, 255))
for i in range(0, W, 16):
    d.rectangle((i, 236, i + 7, 243), fill=(230, 60, 50, 255))
d.polygon([(250, 40), (320, 40), (320, 24), (356, 56), (320, 88), (320, 72), (250, 72)], fill=(220, 40, 60, 255))
font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf", 34)
d.text((20, 190), "wgpu-ops", font=font, fill=(255, 255, 255, 255), stroke_width=2, stroke_fill=(20, 20, 40, 255))
out = pathlib.Path(__file__).parent / "www" / "sample.png"
img.save(out, optimize=True)
print(out, img.size)
