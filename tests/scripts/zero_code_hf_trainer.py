"""An unmodified-style Hugging Face Trainer script: a tiny GPT-2 built from a config (no download), random
tokens, gradient accumulation 2. wattwise is turned on only by ACCELERATE_ENERGY=1 in the environment.

    python zero_code_hf_trainer.py OUTPUT_DIR MAX_STEPS [RESUME]
"""

import sys
from typing import ClassVar

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class Tracker(TrainerCallback):
    """Stands for a `report_to` tracker: what the Trainer's logs carried to it."""

    seen: ClassVar[set[str]] = set()

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.seen.update(logs or {})


class DriveSimulatedGPU(TrainerCallback):
    """Each step also runs the simulated GPU's modelled work (`emulate_step`), as the examples do: an idle
    simulated GPU measures the same idle power at every limit, and tuning then chooses none."""

    trainer = None

    def on_step_begin(self, args, state, control, **kwargs):
        from accelerate_energy.adapter import energy
        from wattwise.tools.workload import emulate_step

        found = energy(self.trainer.accelerator) if self.trainer is not None else None
        if found is not None and found.run.started:
            emulate_step(found.run.gpus, lambda: None)


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 128, (16,), generator=g)
        return {"input_ids": ids, "labels": ids.clone()}


def main() -> None:
    out, max_steps = sys.argv[1], int(sys.argv[2])
    resume = len(sys.argv) > 3 and sys.argv[3] == "resume"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    args = TrainingArguments(
        output_dir=out,
        max_steps=max_steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        save_steps=10,
        save_strategy="steps",
        logging_steps=5,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    driver = DriveSimulatedGPU()
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(), callbacks=[Tracker(), driver])
    driver.trainer = trainer
    trainer.train(resume_from_checkpoint=True if resume else None)
    logged = sorted(Tracker.seen)
    if trainer.is_world_process_zero():
        print(f"global_step {trainer.state.global_step}")
        print(f"logged {' '.join(logged)}")
        print(f"history {' '.join(sorted({key for entry in trainer.state.log_history for key in entry}))}")


if __name__ == "__main__":
    main()
