"""The rig of the lever checks: one model and its training on the GPU under test (CUDA, or the simulated GPU).

`torch` and `transformers` are imported when a rig is made or trains, never when this module is imported.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattwise.devices.base import Device

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback

    from wattwise.tools.checks import Context


@dataclasses.dataclass(frozen=True)
class ModelSize:
    """The masked language model trained by the Trainer checks, and the pipeline's stages."""

    vocab: int
    width: int
    layers: int
    heads: int
    seq: int
    batch: int
    #: Seconds one emulated step lasts at the maximum limit (the simulated GPU only).
    emulated_step_s: float
    #: Pipeline: width, attention heads and layers of each stage, tokens per microbatch (sequences, length).
    stage_width: int
    stage_heads: int
    stage_layers: tuple[int, ...]
    stage_batch: int
    stage_seq: int
    #: Seconds of each stage's forward (backward: twice) at the maximum clock (the simulated GPU only).
    emulated_forward_s: tuple[float, ...]

    def describe(self) -> str:
        """One line for the report."""
        return (
            f"BERT-style masked LM ({self.layers} layers, width {self.width}, vocab {self.vocab}), "
            f"{self.batch} x {self.seq} random tokens per step"
        )


#: BERT-base on a real GPU (bf16): a step keeps a data-centre GPU busy, so the cap matters to it.
REAL_MODEL = ModelSize(
    vocab=30522,
    width=768,
    layers=12,
    heads=12,
    seq=128,
    batch=128,
    emulated_step_s=0.0,
    stage_width=2048,
    stage_heads=16,
    stage_layers=(4, 6),
    stage_batch=8,
    stage_seq=1024,
    emulated_forward_s=(0.0, 0.0),
)
#: A tiny model on the CPU whose steps last the simulated GPU's modelled time.
SIMULATED_MODEL = ModelSize(
    vocab=512,
    width=32,
    layers=2,
    heads=2,
    seq=16,
    batch=4,
    emulated_step_s=0.05,
    stage_width=32,
    stage_heads=1,
    stage_layers=(1, 1),
    stage_batch=2,
    stage_seq=16,
    emulated_forward_s=(0.06, 0.09),
)
#: The hardware check `pipeline`: two halves of a small GPT, four layers each, 4,096 tokens per microbatch.
PIPELINE_CHECK_MODEL = dataclasses.replace(
    REAL_MODEL, stage_width=1024, stage_heads=16, stage_layers=(4, 4), stage_batch=8, stage_seq=512
)


@dataclasses.dataclass
class Rig:
    """The GPU under test, where its work runs (CUDA, or the CPU for the simulated GPU) and how to wait for it."""

    gpu: Device
    model: ModelSize
    cuda_index: int | None

    @classmethod
    def of(cls, ctx: Context, *, trainer: bool = True) -> Rig:
        """The rig for the context's GPU; `trainer`: the check trains with the Hugging Face Trainer.

        Raises:
            Skip: no GPU, no torch (or transformers, for the Trainer), no CUDA for a real GPU, or
                ACCELERATE_ENERGY set (for the Trainer).
        """
        from wattwise.tools.checks import Skip

        gpu = ctx.require_gpu()
        if gpu.simulation is None:
            ctx.require_load()  # torch sees the GPU's CUDA device, or the reason why not
        try:
            import torch  # noqa: F401

            if trainer:
                import transformers  # noqa: F401
        except ImportError as err:
            raise Skip(f"{err.name} is not installed (pip install {err.name})") from None
        if trainer and os.environ.get("ACCELERATE_ENERGY", "") not in ("", "0"):
            raise Skip("ACCELERATE_ENERGY is set: its callback would tune every Trainer; unset it for these checks")
        if gpu.simulation is not None:
            return cls(gpu, SIMULATED_MODEL, None)
        return cls(gpu, REAL_MODEL, int(getattr(gpu, "cuda_index", gpu.index)))

    def clock(self, wall: Callable[[], float] = time.monotonic) -> Callable[[], float]:
        """The clock the rig's work runs on: the simulated GPU's own, else `wall`."""
        return self.gpu.simulation.clock if self.gpu.simulation is not None else wall

    def sync(self) -> None:
        """Wait for the work queued on the GPU (nothing to wait for on the simulated one)."""
        if self.cuda_index is not None:
            import torch

            torch.cuda.synchronize(self.cuda_index)

    def trainer(self, out: Path, callbacks: list[TrainerCallback], seed: int = 0) -> Trainer:
        """A Hugging Face `Trainer` of the masked LM on random tokens, stopped by its callbacks."""
        import torch
        from transformers import BertConfig, BertForMaskedLM, PrinterCallback, TrainingArguments

        from wattwise.tools.levers_training import EmulatedTrainer

        m = self.model
        if self.cuda_index is not None and torch.cuda.device_count() > 1:
            from wattwise.tools.checks import Skip

            raise Skip(
                f"the Trainer would train on all {torch.cuda.device_count()} visible GPUs; run with "
                "CUDA_VISIBLE_DEVICES=N (and --gpu 0) to measure GPU N alone"
            )
        torch.manual_seed(seed)
        config = BertConfig(
            vocab_size=m.vocab,
            hidden_size=m.width,
            num_hidden_layers=m.layers,
            num_attention_heads=m.heads,
            intermediate_size=4 * m.width,
            max_position_embeddings=max(512, m.seq),
        )
        args = TrainingArguments(
            output_dir=str(out / "trainer"),
            max_steps=1_000_000,  # the callbacks stop it
            per_device_train_batch_size=m.batch,
            learning_rate=1e-4,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            use_cpu=self.cuda_index is None,
            bf16=self.cuda_index is not None,
            dataloader_num_workers=0,
            seed=seed,
        )
        trainer = EmulatedTrainer(
            [self.gpu],
            m.emulated_step_s or None,
            model=BertForMaskedLM(config),
            args=args,
            train_dataset=MaskedTokens(m.vocab, m.seq, 64 * m.batch, seed),
            callbacks=callbacks,
        )
        trainer.remove_callback(PrinterCallback)  # the Trainer's own end-of-training line, not the report's
        return trainer


class MaskedTokens:
    """Random token sequences with 15% of positions masked (id 103) and labelled: what an MLM trains on."""

    def __init__(self, vocab: int, seq: int, count: int, seed: int) -> None:
        import torch

        gen = torch.Generator().manual_seed(seed)
        self.labels_source = torch.randint(1000 if vocab > 2000 else 5, vocab, (count, seq), generator=gen)
        masked = torch.rand(count, seq, generator=gen) < 0.15
        self.inputs = self.labels_source.masked_fill(masked, min(103, vocab - 1))
        self.labels = self.labels_source.masked_fill(~masked, -100)

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.inputs[i], "labels": self.labels[i]}
