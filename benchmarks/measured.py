"""What the benchmarks share: each measurement runs in its own process and
prints its result as its last JSON line."""

import json
import subprocess


def measured(command, label, env=None, tail=500):
    """The result that `command` printed as its last JSON line, or None after
    printing why there is none (the end of its output)."""
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        print(f"  {label}: failed or skipped: {(out.stdout + out.stderr).strip()[-tail:]}", flush=True)
        return None
    return json.loads(lines[-1])


def trainer_adamw(model, learning_rate, total_steps, weight_decay=0.01, eps=1e-8):
    """transformers' `Trainer` recipe for `model` (a torch module): AdamW with
    no weight decay on biases and LayerNorm, 10% linear warm-up (rounded up)
    then linear decay over `total_steps`; `(optimizer, schedule)`."""
    import torch
    import transformers

    named = list(model.named_parameters())
    no_decay = [n.endswith("bias") or "LayerNorm" in n for n, _ in named]
    groups = [{"params": [p for (_, p), skip in zip(named, no_decay) if skip == wanted], "weight_decay": decay}
              for wanted, decay in ((False, weight_decay), (True, 0.0))]
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, eps=eps)
    return optimizer, transformers.get_linear_schedule_with_warmup(optimizer, -(-total_steps // 10), total_steps)


def trainer_step(loss, model, optimizer, schedule, clipnorm=1.0):
    """One step of that recipe on `loss`: backward, gradients clipped by
    their global norm, the optimizer's and the schedule's step."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clipnorm)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()
