"""Feeds a `meshplan export --to torchtitan` TOML to torchtitan's own config
parser (torchtitan 0.1.0's ConfigManager.parse_args(["--job.config_file",
...]): its JobConfig dataclasses read with tomllib and tyro) and checks that
every key written is a field of JobConfig, that Literal-typed fields hold one
of their values, and that each parsed value is the one written (the parser
itself ignores keys it does not know, so that check is ours).

    python torchtitan_check.py CONFIG.toml

torchtitan's package __init__ imports its models, which need a newer PyTorch
than Debian's; only the config module is loaded, without that __init__.
Exit 0 when the parser accepted every key and value, 1 otherwise.
"""
import dataclasses
import importlib.util
import sys
import tomllib
import types
import typing

spec = importlib.util.find_spec("torchtitan")
package = types.ModuleType("torchtitan")
package.__path__ = list(spec.submodule_search_locations)
sys.modules["torchtitan"] = package
from torchtitan.config_manager import ConfigManager  # noqa: E402


def main():
    path = sys.argv[1]
    config = ConfigManager().parse_args(["--job.config_file", path])
    with open(path, "rb") as f:
        written = tomllib.load(f)
    bad, keys = [], 0
    for section, values in written.items():
        parsed = getattr(config, section, None)
        if not dataclasses.is_dataclass(parsed):
            bad.append(f"[{section}] is not a section of torchtitan's JobConfig")
            continue
        field_types = {f.name: f.type for f in dataclasses.fields(parsed)}
        for key, value in values.items():
            keys += 1
            if key not in field_types:
                bad.append(f"{section}.{key} is not a field of {type(parsed).__name__}")
                continue
            kind = field_types[key]
            if typing.get_origin(kind) is typing.Literal and value not in typing.get_args(kind):
                bad.append(f"{section}.{key} = {value!r} is not one of {typing.get_args(kind)}")
            if getattr(parsed, key) != value:
                bad.append(f"{section}.{key}: parsed {getattr(parsed, key)!r}, written {value!r}")
    for failure in bad:
        print(f"FAIL: {path}: {failure}", file=sys.stderr)
    print(f"{path}: torchtitan's ConfigManager parsed {keys} keys in {len(written)} sections; {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
