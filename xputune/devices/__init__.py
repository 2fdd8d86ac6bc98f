"""Vendor providers: what only the vendor's library or tool knows about a card.

Kunlunxin: the libxpuml.so binding (`xpuml`), the xpu-smi output parsers (`xpusmi`).
NVIDIA: NVML through nvidia-ml-py (`nvml`). NUMA and PCIe placement never come from here (sysfs
is the source of truth for them); providers add names, memory sizes, driver versions and
serials, joined to the topology's cards by PCI bus id (`enrich`), and the links between cards
that PCIe cannot show, NVLink (NV#) and XPU Link (XL), merged into the relation matrix
(`links`, from the sources in `link_sources`; `vendor_files` saves and reads the vendor tools'
outputs in a recording). `runtime` registers host memory with a device runtime
(cudaHostRegister, xpu_host_register).
"""
