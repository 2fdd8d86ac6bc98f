/*
 * The small C ABI every xputune copy backend exposes to Python (loaded through ctypes).
 *
 * A transfer is planned in Python into a segment table: three parallel arrays of equal length
 * (absolute source address, absolute destination address, byte count). Every backend consumes
 * the same table, so the planner that decides how many submissions a layer costs is shared and
 * tested once, and a backend only has to move bytes.
 *
 * Return codes: 0 on success; a negative XT_E* value for an argument problem; a positive value is
 * the vendor runtime's own error code.
 */
#ifndef XT_COPY_H
#define XT_COPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XT_ABI_VERSION 1

#define XT_OK 0
#define XT_EINVAL (-22)
#define XT_ENOMEM (-12)
#define XT_ERANGE_SRC (-34)
#define XT_ERANGE_DST (-35)

/* Directions, shared by the device backends (values match XRE's XPUMemcpyKind for 0 and 1). */
#define XT_D2H 0
#define XT_H2D 1
#define XT_D2D 2
#define XT_H2H 3

#ifdef __cplusplus
}
#endif

#endif /* XT_COPY_H */
