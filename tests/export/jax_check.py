"""Checks a `meshplan export --to jax` module with JAX itself: every array it
declares is placed by JAX, block for block, on the device meshplan's
ShardingSpec gives it (the blocks come from tests/export/sharding_blocks).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        python jax_check.py --module plan_jax.py --blocks blocks.json

Exit 0 when every block of every array agrees, 1 otherwise (each mismatch
named), 2 on bad input.
"""
import argparse
import importlib.util
import json
import sys

import numpy as np
import jax
from jax.sharding import NamedSharding

# Arrays up to this many elements are also materialized with device_put, and
# each device's shard compared with the values of its block.
MATERIALIZE_ELEMENTS = 1 << 20


def load_module(path):
    spec = importlib.util.spec_from_file_location("exported_plan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bounds(index, shape):
    return [list(s.indices(n)[:2]) for s, n in zip(index, shape)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", required=True)
    parser.add_argument("--blocks", required=True)
    args = parser.parse_args()
    module = load_module(args.module)
    with open(args.blocks) as f:
        expected = json.load(f)
    mesh = module.make_mesh()
    rank_of = {device: rank for rank, device in enumerate(mesh.devices.flat)}
    # meshplan rank r is jax.devices()[r]
    if any(device.id != rank for device, rank in rank_of.items()):
        print("FAIL: the mesh does not keep meshplan's rank order", file=sys.stderr)
        return 1
    failures, arrays, blocks, materialized = [], 0, 0, 0
    for group in ("PARAMS", "GRADS", "OPT_STATE", "ACTIVATIONS"):
        declared = getattr(module, group)
        if set(declared) != set(expected[group]):
            failures.append(f"{group}: names differ: module only {sorted(set(declared) - set(expected[group]))}, "
                            f"meshplan only {sorted(set(expected[group]) - set(declared))}")
            continue
        for name, (shape, spec) in declared.items():
            want = expected[group][name]
            arrays += 1
            if list(shape) != want["shape"]:
                failures.append(f"{group}[{name}]: shape {shape}, meshplan {want['shape']}")
                continue
            sharding = NamedSharding(mesh, spec)
            placed = sharding.devices_indices_map(tuple(shape))
            for device, index in placed.items():
                got, rank = bounds(index, shape), rank_of[device]
                blocks += 1
                if got != want["blocks"][str(rank)]:
                    failures.append(f"{group}[{name}] {spec}: device {rank} holds {got}, "
                                    f"meshplan says {want['blocks'][str(rank)]}")
            if int(np.prod(shape)) <= MATERIALIZE_ELEMENTS:
                values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
                array = jax.device_put(values, sharding)
                for shard in array.addressable_shards:
                    lo_hi = want["blocks"][str(rank_of[shard.device])]
                    block = values[tuple(slice(lo, hi) for lo, hi in lo_hi)]
                    if not np.array_equal(np.asarray(shard.data), block):
                        failures.append(f"{group}[{name}]: device {rank_of[shard.device]}'s shard holds other values")
                materialized += 1
    for failure in failures[:40]:
        print("FAIL:", failure, file=sys.stderr)
    print(f"{args.module}: mesh {dict(mesh.shape)}, {arrays} arrays, {blocks} device blocks compared, "
          f"{materialized} arrays placed with device_put; {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
