"""Feeds a `meshplan export --to deepspeed` JSON to DeepSpeed's own config
parser (deepspeed.runtime.config.DeepSpeedConfig, which validates the ZeRO
section with pydantic and asserts train_batch_size = micro-batch x
accumulation x data-parallel ranks) and checks what it parsed.

    python deepspeed_check.py CONFIG.json DATA_PARALLEL STAGE PRECISION

The data-parallel size is what a launcher's process group would give
DeepSpeed; here a stand-in mpu gives it (torch.distributed is not started).
Exit 0 when DeepSpeed parsed the plan's stage, precision and batch, 1 otherwise.
"""
import json
import sys

import deepspeed.runtime.config as ds_config


class DataParallelGroup:
    """The model-parallel unit DeepSpeed asks for the data-parallel world size."""

    def __init__(self, size):
        self.size = size

    def get_data_parallel_world_size(self):
        return self.size

    def get_data_parallel_rank(self):
        return 0

    def get_model_parallel_world_size(self):
        return 1

    def get_model_parallel_rank(self):
        return 0


def main():
    path, data_parallel, stage, precision = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    ds_config.dist.get_rank = lambda: 0  # no process group: rank 0 of the stand-in's world
    with open(path) as f:
        written = json.load(f)
    parsed = ds_config.DeepSpeedConfig(path, mpu=DataParallelGroup(data_parallel))
    checks = {
        "world_size": (parsed.world_size, data_parallel),
        "train_batch_size": (parsed.train_batch_size, written["train_batch_size"]),
        "train_micro_batch_size_per_gpu": (parsed.train_micro_batch_size_per_gpu,
                                           written["train_micro_batch_size_per_gpu"]),
        "gradient_accumulation_steps": (parsed.gradient_accumulation_steps, written["gradient_accumulation_steps"]),
        "zero_optimization_stage": (parsed.zero_optimization_stage, stage),
        "bfloat16_enabled": (parsed.bfloat16_enabled, precision == "bf16"),
        "fp16_enabled": (parsed.fp16_enabled, precision == "fp16"),
        "gradient_clipping": (parsed.gradient_clipping, written["gradient_clipping"]),
    }
    bad = {k: v for k, v in checks.items() if v[0] != v[1]}
    for key, (got, want) in bad.items():
        print(f"FAIL: {path}: DeepSpeed parsed {key} = {got}, expected {want}", file=sys.stderr)
    print(f"{path}: DeepSpeedConfig parsed it: "
          + ", ".join(f"{k}={v[0]}" for k, v in checks.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
