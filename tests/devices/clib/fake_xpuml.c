/* A stand-in for Kunlunxin's libxpuml.so, built by the tests (tests/devices/conftest.py).
 *
 * It exports the xpuml ABI over fixed data for the seed box's 8 P800 cards (bus ids of
 * xputune/examples/h3c-hygon-p800.tar.xz) so the ctypes binding runs end to end without a card.
 * Deliberate faults: index 6 is a lost device (every per-device call returns 15), index 7 has
 * no serial (3, not supported), and xpumlDeviceGetPowerUsage is not exported at all (the
 * binding must say 13, function not found). fake_xpuml_fail(name, rc) makes the named
 * function return rc from then on; fake_xpuml_reset() clears that and the init count.
 */
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct { unsigned index; } xpumlDevice_st;
typedef xpumlDevice_st *xpumlDevice_t;

typedef struct {
    unsigned int domain, bus, device, function, pciDeviceId, pciSubSystemId;
    char busId[32];
} xpumlPciInfo_t;

typedef struct { unsigned long long total, free, used; } xpumlMemory_t;
typedef struct { unsigned int gpu, memory; } xpumlUtilization_t;

enum { OK = 0, NOT_SUPPORTED = 3, DRIVER_NOT_LOADED = 9, DEVICE_LOST = 15, UNKNOWN = 999 };

static const unsigned BUS[8] = {0x23, 0x24, 0x63, 0x64, 0xa3, 0xa4, 0xe3, 0xe4};
static const unsigned long long TOTAL = 96ULL << 30;
static xpumlDevice_st devices[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int init_count = 0;
static char fail_name[64] = "";
static int fail_rc = 0;

EXPORT void fake_xpuml_fail(const char *name, int rc) {
    snprintf(fail_name, sizeof fail_name, "%s", name);
    fail_rc = rc;
}
EXPORT void fake_xpuml_reset(void) { fail_name[0] = 0; fail_rc = 0; init_count = 0; }
EXPORT int fake_xpuml_init_count(void) { return init_count; }

static int forced(const char *name) { return fail_name[0] && !strcmp(fail_name, name) ? fail_rc : 0; }
#define FORCED(name) do { int rc_ = forced(name); if (rc_) return rc_; } while (0)
#define READY() do { if (init_count <= 0) return DRIVER_NOT_LOADED; } while (0)
#define DEVICE(d) do { if (!(d) || (d)->index >= 8) return UNKNOWN; \
                       if ((d)->index == 6) return DEVICE_LOST; } while (0)

static int copy(char *out, unsigned len, const char *text) {
    if (!out || len <= strlen(text)) return UNKNOWN;
    memcpy(out, text, strlen(text) + 1);
    return OK;
}

EXPORT int xpumlInit(void) { FORCED("xpumlInit"); init_count++; return OK; }
EXPORT int xpumlShutdown(void) { FORCED("xpumlShutdown"); READY(); init_count--; return OK; }

EXPORT const char *xpumlErrorString(int rc) {
    switch (rc) {
    case OK: return "Success";
    case NOT_SUPPORTED: return "Not Supported";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case 12: return "Library Not Found";
    case 13: return "Function Not Found";
    case DEVICE_LOST: return "XPU is lost";
    default: return "Unknown Error";
    }
}

EXPORT int xpumlSystemGetDriverVersion(char *out, unsigned len) {
    FORCED("xpumlSystemGetDriverVersion"); READY();
    return copy(out, len, "5.0.21.26");
}

EXPORT int xpumlDeviceGetCount(unsigned *count) {
    FORCED("xpumlDeviceGetCount"); READY();
    *count = 8;
    return OK;
}

EXPORT int xpumlDeviceGetHandleByIndex(unsigned index, xpumlDevice_t *out) {
    FORCED("xpumlDeviceGetHandleByIndex"); READY();
    if (index >= 8) return UNKNOWN;
    *out = &devices[index];
    return OK;
}

EXPORT int xpumlDeviceGetName(xpumlDevice_t d, char *out, unsigned len) {
    FORCED("xpumlDeviceGetName"); READY(); DEVICE(d);
    return copy(out, len, "Kunlunxin P800");
}

EXPORT int xpumlDeviceGetSerial(xpumlDevice_t d, char *out, unsigned len) {
    char text[32];
    FORCED("xpumlDeviceGetSerial"); READY(); DEVICE(d);
    if (d->index == 7) return NOT_SUPPORTED;
    snprintf(text, sizeof text, "02P8K2500%03u", d->index);
    return copy(out, len, text);
}

EXPORT int xpumlDeviceGetPciInfo(xpumlDevice_t d, xpumlPciInfo_t *pci) {
    FORCED("xpumlDeviceGetPciInfo"); READY(); DEVICE(d);
    memset(pci, 0, sizeof *pci);
    pci->bus = BUS[d->index];
    pci->pciDeviceId = 0x36881d22;
    pci->pciSubSystemId = 0x00011d22;
    snprintf(pci->busId, sizeof pci->busId, "0000:%02X:00.0", BUS[d->index]);
    return OK;
}

EXPORT int xpumlDeviceGetMemoryInfo(xpumlDevice_t d, xpumlMemory_t *mem) {
    FORCED("xpumlDeviceGetMemoryInfo"); READY(); DEVICE(d);
    mem->total = TOTAL;
    mem->used = (unsigned long long)d->index << 30;
    mem->free = mem->total - mem->used;
    return OK;
}

EXPORT int xpumlDeviceGetUtilizationRates(xpumlDevice_t d, xpumlUtilization_t *u) {
    FORCED("xpumlDeviceGetUtilizationRates"); READY(); DEVICE(d);
    u->gpu = 10 * d->index;
    u->memory = 3 * d->index;
    return OK;
}

EXPORT int xpumlDeviceGetTemperature(xpumlDevice_t d, int sensor, unsigned *temp) {
    FORCED("xpumlDeviceGetTemperature"); READY(); DEVICE(d);
    if (sensor != 0) return NOT_SUPPORTED;
    *temp = 41 + d->index;
    return OK;
}

EXPORT int xpumlDeviceGetMinorNumber(xpumlDevice_t d, unsigned *minor) {
    FORCED("xpumlDeviceGetMinorNumber"); READY(); DEVICE(d);
    *minor = d->index;
    return OK;
}
/* xpumlDeviceGetPowerUsage: deliberately missing (an older library). */
