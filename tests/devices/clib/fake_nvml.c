/* A stand-in for libnvidia-ml.so.1, built by the tests (tests/devices/conftest.py).
 *
 * Exports the handful of NVML symbols pynvml (nvidia-ml-py 12/13) calls for the provider:
 * nvmlInitWithFlags (what pynvml.nvmlInit calls) and nvmlInit_v2, nvmlShutdown,
 * nvmlErrorString, nvmlSystemGetDriverVersion, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName, nvmlDeviceGetPciInfo_v3 (nvmlPciInfo_t
 * with busIdLegacy[16] first and busId[32] last), nvmlDeviceGetMemoryInfo (v1: total, free,
 * used) and nvmlDeviceGetSerial, over the 8 H100 of xputune/examples/nvidia-hgx-h100.tar.xz.
 * Bus ids are NVML's spelling ("00000000:3B:00.0"). Index 3 is lost (15); index 7 has no
 * serial (3). fake_nvml_fail(name, rc) forces a return code; fake_nvml_reset() clears it.
 *
 * NVLink (nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkRemotePciInfo_v2,
 * nvmlDeviceGetNvLinkRemoteDeviceType), in one of three shapes set by fake_nvml_nvlink(mode):
 *   0 (default) HGX H100: 18 links per GPU, all to NVSwitches (four switches, 5+4+4+5 links);
 *     the remote PCI info of a link is the switch's, never the peer GPU's, as on real
 *     NVSwitch systems. Link numbers 18 and up answer INVALID_ARGUMENT (2).
 *   1 bridges: GPUs 0-1, 2-3, 4-5, 6-7 joined directly by 4 links each (remote = peer GPU);
 *     links 4..17 inactive.
 *   2 no NVLink: every link call answers NOT_SUPPORTED (a PCIe card).
 * fake_nvml_lose(index) chooses the lost GPU (-1: none); fake_nvml_reset() restores 3 and mode 0.
 */
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct { unsigned index; } nvmlDevice_st;
typedef nvmlDevice_st *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, INSUFFICIENT_SIZE = 7,
       DRIVER_NOT_LOADED = 9, GPU_IS_LOST = 15, UNKNOWN = 999 };

static const unsigned BUS[8] = {0x18, 0x19, 0x3a, 0x3b, 0x9a, 0x9b, 0xbb, 0xbc};
static nvmlDevice_st devices[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int init_count = 0;
static char fail_name[64] = "";
static int fail_rc = 0;
static int lost = 3;
static int nvlink_mode = 0;
static const unsigned SWITCH_BUS[4] = {0x05, 0x06, 0x07, 0x08};

EXPORT void fake_nvml_fail(const char *name, int rc) {
    snprintf(fail_name, sizeof fail_name, "%s", name);
    fail_rc = rc;
}
EXPORT void fake_nvml_reset(void) {
    fail_name[0] = 0; fail_rc = 0; init_count = 0; lost = 3; nvlink_mode = 0;
}
EXPORT void fake_nvml_lose(int index) { lost = index; }
EXPORT void fake_nvml_nvlink(int mode) { nvlink_mode = mode; }
EXPORT int fake_nvml_init_count(void) { return init_count; }

static int forced(const char *name) { return fail_name[0] && !strcmp(fail_name, name) ? fail_rc : 0; }
#define FORCED(name) do { int rc_ = forced(name); if (rc_) return rc_; } while (0)
#define READY() do { if (init_count <= 0) return UNINITIALIZED; } while (0)
#define DEVICE(d) do { if (!(d) || (d)->index >= 8) return UNKNOWN; \
                       if ((int)(d)->index == lost) return GPU_IS_LOST; } while (0)

static int copy(char *out, unsigned len, const char *text) {
    if (!out || len <= strlen(text)) return INSUFFICIENT_SIZE;
    memcpy(out, text, strlen(text) + 1);
    return OK;
}

EXPORT int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    FORCED("nvmlInit"); init_count++; return OK;
}
EXPORT int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT int nvmlShutdown(void) { READY(); init_count--; return OK; }

EXPORT const char *nvmlErrorString(int rc) {
    switch (rc) {
    case OK: return "Success";
    case UNINITIALIZED: return "Uninitialized";
    case NOT_SUPPORTED: return "Not Supported";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

EXPORT int nvmlSystemGetDriverVersion(char *out, unsigned len) {
    FORCED("nvmlSystemGetDriverVersion"); READY();
    return copy(out, len, "550.54.15");
}

EXPORT int nvmlDeviceGetCount_v2(unsigned *count) {
    FORCED("nvmlDeviceGetCount"); READY();
    *count = 8;
    return OK;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *out) {
    FORCED("nvmlDeviceGetHandleByIndex"); READY();
    if (index >= 8) return UNKNOWN;
    *out = &devices[index];
    return OK;
}

EXPORT int nvmlDeviceGetName(nvmlDevice_t d, char *out, unsigned len) {
    FORCED("nvmlDeviceGetName"); READY(); DEVICE(d);
    return copy(out, len, "NVIDIA H100 80GB HBM3");
}

EXPORT int nvmlDeviceGetSerial(nvmlDevice_t d, char *out, unsigned len) {
    char text[32];
    FORCED("nvmlDeviceGetSerial"); READY(); DEVICE(d);
    if (d->index == 7) return NOT_SUPPORTED;
    snprintf(text, sizeof text, "165222301234%u", d->index);
    return copy(out, len, text);
}

EXPORT int nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    FORCED("nvmlDeviceGetPciInfo"); READY(); DEVICE(d);
    memset(pci, 0, sizeof *pci);
    pci->bus = BUS[d->index];
    pci->pciDeviceId = 0x233010de;
    pci->pciSubSystemId = 0x16c110de;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", BUS[d->index]);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", BUS[d->index]);
    return OK;
}

EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *mem) {
    FORCED("nvmlDeviceGetMemoryInfo"); READY(); DEVICE(d);
    mem->total = 81559ULL << 20;
    mem->used = 0;
    mem->free = mem->total;
    return OK;
}

/* NVLink ---------------------------------------------------------------------------------- */
enum { LINKS = 18, TYPE_GPU = 0, TYPE_SWITCH = 2 };

static int link_switch(unsigned link) { return link < 5 ? 0 : link < 9 ? 1 : link < 13 ? 2 : 3; }

static int link_ok(nvmlDevice_t d, unsigned link) {
    if (nvlink_mode == 2) return NOT_SUPPORTED;
    if (link >= LINKS) return INVALID_ARGUMENT;
    (void)d;
    return OK;
}

static int link_active(unsigned link) { return nvlink_mode == 0 || link < 4; }

EXPORT int nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned link, unsigned *active) {
    int rc;
    FORCED("nvmlDeviceGetNvLinkState"); READY(); DEVICE(d);
    if ((rc = link_ok(d, link))) return rc;
    *active = link_active(link);
    return OK;
}

EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned link, nvmlPciInfo_t *pci) {
    int rc;
    unsigned bus;
    FORCED("nvmlDeviceGetNvLinkRemotePciInfo"); READY(); DEVICE(d);
    if ((rc = link_ok(d, link))) return rc;
    if (!link_active(link)) return NOT_SUPPORTED;
    bus = nvlink_mode == 0 ? SWITCH_BUS[link_switch(link)] : BUS[d->index ^ 1];
    memset(pci, 0, sizeof *pci);
    pci->bus = bus;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", bus);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", bus);
    return OK;
}

EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned link, int *type) {
    int rc;
    FORCED("nvmlDeviceGetNvLinkRemoteDeviceType"); READY(); DEVICE(d);
    if ((rc = link_ok(d, link))) return rc;
    if (!link_active(link)) return NOT_SUPPORTED;
    *type = nvlink_mode == 0 ? TYPE_SWITCH : TYPE_GPU;
    return OK;
}
