"""monarch.spmd: torchrun-style scripts over a mesh are not mapped onto baton yet; each name is
importable and says what to use instead."""

from ._unsupported import Unsupported


def _spmd(name):
    return Unsupported(
        f"monarch.spmd.{name}",
        "Monarch's SPMD actors are not supported by baton yet: spawn your own actors and join "
        "them with baton.collective, or use baton's C++ run_spmd",
    )


SPMDActor = _spmd("SPMDActor")
setup_torch_elastic_env = _spmd("setup_torch_elastic_env")
setup_torch_elastic_env_async = _spmd("setup_torch_elastic_env_async")

__all__ = ["SPMDActor", "setup_torch_elastic_env", "setup_torch_elastic_env_async"]
