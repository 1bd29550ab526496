"""Train xrand's embedded default model: a small DDPM UNet on scikit-learn's 8x8 digits.

The images ship inside scikit-learn (no network). They are upscaled to 16x16, scaled to
[-1, 1] and used to train a ~1.1M-parameter diffusers UNet2DModel (one attention block in
the down path, one in the up path, one in the middle) with the usual DDPM objective.
Everything is seeded and torch runs in deterministic mode on a fixed thread count, so the
same command on the same torch version and CPU gives the same weights.

    python scripts/train_digits.py --steps 1200 --out xrand/models/digits

The output folder is a diffusers pipeline folder (model_index.json, unet/, scheduler/) that
both diffusers' and mindone's DDIMPipeline.from_pretrained can read (safetensors weights).
"""

import argparse
import copy
import hashlib
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

IMAGE_SIZE = 16

UNET_CONFIG = dict(
    sample_size=IMAGE_SIZE,
    in_channels=1,
    out_channels=1,
    layers_per_block=1,
    block_out_channels=(32, 64, 64),
    down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    norm_num_groups=8,
)

SCHEDULER_CONFIG = dict(
    num_train_timesteps=1000,
    beta_start=1e-4,
    beta_end=0.02,
    beta_schedule="linear",
    clip_sample=True,
)


def load_images() -> torch.Tensor:
    """The 1,797 scikit-learn digits as a (N, 1, 16, 16) float32 tensor in [-1, 1]."""
    from sklearn.datasets import load_digits

    images = load_digits().images.astype(np.float32) / 16.0  # pixel values are 0..16
    x = torch.from_numpy(images)[:, None]
    x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False)
    return x.clamp(0, 1) * 2 - 1


def train(steps: int, batch_size: int, lr: float, seed: int, threads: int, ema_decay: float):
    """Train and return (ema_unet, scheduler, stats)."""
    from diffusers import DDPMScheduler, UNet2DModel

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    data = load_images()
    unet = UNet2DModel(**UNET_CONFIG)
    ema = copy.deepcopy(unet).requires_grad_(False)
    scheduler = DDPMScheduler(**SCHEDULER_CONFIG)
    opt = torch.optim.AdamW(unet.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + np.cos(np.pi * s / steps))
    )
    alphas_cumprod = scheduler.alphas_cumprod

    losses = []
    start = time.perf_counter()
    for step in range(steps):
        idx = torch.randint(0, len(data), (batch_size,), generator=gen)
        x0 = data[idx]
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.randint(0, SCHEDULER_CONFIG["num_train_timesteps"], (batch_size,), generator=gen)
        a = alphas_cumprod[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        loss = F.mse_loss(unet(xt, t).sample, noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        opt.step()
        sched.step()
        # EMA with a warm-up so the average is useful after a short run
        decay = min(ema_decay, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, p in zip(ema.parameters(), unet.parameters()):
                pe.lerp_(p, 1 - decay)
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {np.mean(losses[-100:]):.4f}  "
                  f"{time.perf_counter() - start:6.1f} s", flush=True)
    stats = dict(
        seconds=round(time.perf_counter() - start, 1),
        final_loss_mean_last_100=round(float(np.mean(losses[-100:])), 4),
        first_loss=round(losses[0], 4),
    )
    return ema, scheduler, stats


def save(out: Path, unet, scheduler_config: dict, stats: dict, args) -> None:
    """Write a diffusers DDIMPipeline folder plus a README recording how it was made."""
    import diffusers
    from diffusers import DDIMScheduler

    out.mkdir(parents=True, exist_ok=True)
    unet.save_pretrained(out / "unet", safe_serialization=True)
    # The pipeline that samples it is DDIM; the training schedule carries over unchanged.
    DDIMScheduler(**scheduler_config).save_pretrained(out / "scheduler")
    index = {
        "_class_name": "DDIMPipeline",
        "_diffusers_version": diffusers.__version__,
        "scheduler": ["diffusers", "DDIMScheduler"],
        "unet": ["diffusers", "UNet2DModel"],
    }
    (out / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    write_readme(out, sum(p.numel() for p in unet.parameters()), stats, args)


def write_readme(out: Path, n_params: int, stats: dict, args) -> None:
    """The model card: what the weights are and the exact command that made them."""
    import diffusers

    weights = (out / "unet" / "diffusion_pytorch_model.safetensors").read_bytes()
    command = (f"python scripts/train_digits.py --steps {args.steps} --batch-size {args.batch_size} "
               f"--lr {args.lr} --seed {args.seed} --threads {args.threads} "
               f"--ema-decay {args.ema_decay} --out {args.out}")
    (out / "README.md").write_text(f"""# digits: xrand's default DDPM model

A {n_params / 1e6:.2f}M-parameter diffusers `UNet2DModel` trained by xrand on the 1,797 8x8
digit images shipped with scikit-learn (`sklearn.datasets.load_digits`), bilinearly upscaled to
{IMAGE_SIZE}x{IMAGE_SIZE}, 1 channel, scaled to [-1, 1]. Weights are the EMA (decay
{args.ema_decay}) of the trained weights, fp32 safetensors. Sample it with `DDIMPipeline` from
diffusers or mindone (`from_pretrained` on this folder); 50 DDIM steps give recognisable digits.

- command: `{command}`
- seed: {args.seed}; torch deterministic algorithms on; {args.threads} CPU threads
- objective: epsilon prediction, MSE; DDPM linear betas 1e-4..0.02, 1000 steps, clip_sample=True
- optimiser: AdamW lr {args.lr}, linear warm-up then cosine decay, batch {args.batch_size},
  gradient norm clipped at 1.0
- training steps: {args.steps}; loss at step 0: {stats['first_loss']}; mean loss over the last
  100 steps: {stats['final_loss_mean_last_100']}
- training time: {stats['seconds']} s on {platform.processor() or platform.machine()}
  ({args.threads} threads, shared machine)
- torch {torch.__version__}, diffusers {diffusers.__version__}, Python {platform.python_version()}
- sha256 of unet/diffusion_pytorch_model.safetensors: {hashlib.sha256(weights).hexdigest()}
  (deterministic mode: two 30-step runs gave bit-identical weights on the same machine)
""")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ema-decay", type=float, default=0.995)
    p.add_argument("--out", default="xrand/models/digits")
    args = p.parse_args()
    unet, scheduler, stats = train(args.steps, args.batch_size, args.lr, args.seed, args.threads,
                                   args.ema_decay)
    save(Path(args.out), unet, SCHEDULER_CONFIG, stats, args)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
