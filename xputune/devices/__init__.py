"""Vendor providers: what only the vendor's library or tool knows about a card.

Kunlunxin: the libxpuml.so binding (`xpuml`), the xpu-smi output parsers (`xpusmi`).
NVIDIA: NVML through nvidia-ml-py (`nvml`). Topology never comes from here (sysfs is the
source of truth for NUMA and PCIe); providers add names, memory sizes, driver versions and
serials, joined to the topology's cards by PCI bus id (`enrich`). `runtime` registers host
memory with a device runtime (cudaHostRegister, xpu_host_register).
"""
