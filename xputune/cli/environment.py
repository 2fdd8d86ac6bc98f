"""Every XPUTUNE_* environment variable xputune reads, said once: the ENVIRONMENT section of
`xputune --help`, of each command's help that reads some, and of the man pages.

tests/cli/test_tables.py keeps this table equal to the variables the code reads.
"""

from __future__ import annotations

#: name -> (what it does, the commands it matters to; () for all)
VARIABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "XPUTUNE_CACHE_DIR": (
        "Where per-user caches live (recording tables, parsed profiles, built kernels). "
        "Default ~/.cache/xputune, /var/cache/xputune for root; used only when it and every "
        "folder above it are writable by this user or root alone.",
        (),
    ),
    "XPUTUNE_CACHE": (
        "off, 0 or no: keep no recording tables or parsed profiles (built kernels stay).",
        (),
    ),
    "XPUTUNE_VENDOR_LIBRARIES": (
        "off: do not load NVML or libxpuml, nor run xpu-smi (NVML can take seconds to start).",
        ("probe", "smi", "record"),
    ),
    "XPUTUNE_XPUML_LIBRARY": (
        "Path of Kunlunxin's libxpuml.so to load (for a recording, the only one used).",
        ("probe", "smi", "record"),
    ),
    "XPUTUNE_NVML_LIBRARY": (
        "Path of NVIDIA's libnvidia-ml.so to load (for a recording, the only one used).",
        ("probe", "smi", "record"),
    ),
    "XPUTUNE_COPY_BACKEND": (
        "cuda or xpu: the device backend of the KV copy kernels (default: what the host has).",
        ("kernels", "bench"),
    ),
    "XPUTUNE_COPY_THREADS": (
        "Threads of the host copy backend (0 or unset: one below 4 MiB, then one per CPU).",
        ("kernels", "bench"),
    ),
    "XPUTUNE_CUDA_ARCH": ("nvcc's -arch for the CUDA kernels (default sm_75).", ("kernels",)),
    "XPUTUNE_XRE_HOME": (
        "Kunlunxin's runtime (XRE) folder for the XPU kernels; XRE_HOME, XPURT_HOME and "
        "XPU_HOME are tried next.",
        ("kernels",),
    ),
    "XPUTUNE_SGLANG_PYTHON": (
        "The Python of SGLang's environment (what --python names; default: the Python running "
        "xputune): launch runs SGLang with it, and it is asked which sglang release and "
        "xputune plugin it has.",
        ("launch", "plan", "sweep"),
    ),
    "XPUTUNE_HICACHE_LIFO": ("1: the SGLang plugin's LIFO host-slot allocator.", ("launch",)),
    "XPUTUNE_HICACHE_ASYNC": (
        "1: the plugin submits L2 copies off the scheduler thread.",
        ("launch",),
    ),
    "XPUTUNE_HICACHE_COUNT_ONCE": (
        "1: the plugin counts a request once per prefix (write_through_selective).",
        ("launch",),
    ),
    "XPUTUNE_HICACHE_GHOST": (
        "1: the plugin's ghost list writes back only proven-reused prefixes.",
        ("launch",),
    ),
    "XPUTUNE_HICACHE_GHOST_CAPACITY": ("Page hashes the ghost list keeps (default 262144).", ()),
    "XPUTUNE_HICACHE_KERNELS": (
        "1: the host pools' copies run on xputune's kernels (every layout SGLang uses).",
        ("launch",),
    ),
    "XPUTUNE_HICACHE_NUMA": (
        "NUMA node per visible card ('1 1 3 3'): each rank's host KV buffer is placed there.",
        ("launch",),
    ),
    "XPUTUNE_HICACHE_TP_SHARED": ("1: one host KV buffer shared by the TP group.", ("launch",)),
    "XPUTUNE_HICACHE_HOST_BUFFER": (
        "1: the host KV buffer is the plugin's (CPU servers, and where SGLang's would be "
        "registered with cudaHostRegister).",
        ("launch",),
    ),
    "XPUTUNE_HICACHE_STATS": (
        "Absolute folder where each server process writes the plugin's counters.",
        ("launch",),
    ),
    "XPUTUNE_HICACHE_ON_MISMATCH": (
        "exit (default) or warn: what the plugin does when SGLang is not the release it targets.",
        ("launch",),
    ),
    "XPUTUNE_TEST_CRASH_AT_STEP": (
        "Testing only: apply kills itself at this step, to prove rollback after a crash.",
        ("apply",),
    ),
    "XPUTUNE_TEST_TPSHARED_KILL": (
        "Testing only: a TP-shared buffer's rank 0 kills itself at this stage.",
        ("launch",),
    ),
}


def for_command(words: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, what) of the variables that matter to a command."""
    return [
        (name, what)
        for name, (what, commands) in VARIABLES.items()
        if not commands or words[0] in commands
    ]
