"""Training at scale: distribution strategies, BERT's optimizers and
schedules, and callbacks for long runs that survive interruptions.

Mixed precision needs no code here: build the model with a dtype policy,
`kbert.BertClassifier.from_preset("base", num_classes=2, dtype="mixed_bfloat16")`.
Weights stay float32 and matmuls run in bfloat16; LayerNorm computes in
float32, attention's softmax is taken on float32 logits, and the heads'
logits, hence the losses, are float32. With `"mixed_float16"` also scale the
loss: `fine_tuning_optimizer(..., loss_scale=True)`. `dtype="auto"` picks
`"mixed_bfloat16"` where the hardware multiplies bfloat16 fast (CPUs with AMX
or AVX512-BF16, Ampere+ GPUs, TPUs) and float32 elsewhere
(`kbert.training.precision.fast_bfloat16()`). On TensorFlow without an
accelerator, bfloat16 is first tried in a child process, once per machine,
because on some CPUs its oneDNN kernels kill the process
(`kbert.training.precision.bfloat16_crash()`).
"""

from kbert.training import listwise, precision
from kbert.training.adamw import AdamW, Lamb
from kbert.training.distribution import data_parallel, strategy
from kbert.training.optimizers import (
    WarmupLinearDecay,
    bert_adamw,
    bert_lamb,
    fine_tuning_optimizer,
    pretraining_optimizer,
    with_options,
)
from kbert.training.runs import BackupAndRestore, callbacks, trained_steps
