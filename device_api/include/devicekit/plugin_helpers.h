/*
 * DeviceKit plugin helpers — optional, header-only C for plugin authors.
 *
 * The glue every plugin restates: the error object behind the opaque DK_Error
 * (with printf-formatted messages and the three Error_* table entries),
 * argument checks that produce the messages device_api.h asks for ("the call,
 * the expected, the found, a hint"), dense / strided view helpers and dtype
 * sizes. Include it in a plugin's own sources after <devicekit/device_api.h>.
 *
 * It is NOT part of the device API's ABI: every function is `static inline`
 * and nothing in it crosses the plugin boundary, so using it (or not) changes
 * nothing the SDK can see, and device_api.h never includes it. The SDK does
 * not include it either: only plugins do.
 *
 * What including it means for a plugin:
 * - It defines `struct DK_Error` (the type device_api.h leaves opaque) as
 *   { int32_t code; char message[]; }. A plugin that uses it does not define
 *   its own, and uses dkh_Error_Destroy / _Message / _GetCode in its DK_Api.
 * - Every identifier it defines starts with `dkh_` / `DKH_`.
 * - C99 or later; it needs only the C standard library. (C++ compilers take
 *   it too, with the flexible array member in DK_Error as an extension.)
 *
 * Thread-safety: every function is thread-safe (no shared state except the
 * constant out-of-memory error object).
 */
#ifndef DEVICEKIT_PLUGIN_HELPERS_H_
#define DEVICEKIT_PLUGIN_HELPERS_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/*  Versioning                                                                */
/* ========================================================================== */
/*
 * The helpers follow the device API's rules (device_api.h, "Versioning"),
 * applied to source rather than ABI, and are versioned with it: this file
 * ships next to device_api.h and carries the same DK_API_MAJOR.DK_API_MINOR.
 * 1. Within a major, helpers are only added (at the end of their section):
 *    no helper is removed, renamed, re-typed, and no message or behaviour
 *    changes meaning, so a plugin that compiles against the helpers of 1.m
 *    compiles, unchanged and with the same behaviour, against those of 1.n>m.
 * 2. DKH_HELPERS_SINCE_<major>_<minor> marks what a minor added; a plugin
 *    targeting an older minor may test it with #ifdef.
 * 3. Every change gets a line in CHANGELOG.md under "Plugin helpers".
 */
#define DKH_HELPERS_SINCE_1_2 1 /* first version of this file */
/* Appended within 1.2 (source-compatible additions, each with its CHANGELOG
 * line): dkh_is_contiguous. Test for it with #ifdef DKH_HAS_IS_CONTIGUOUS.
 * Appended within 1.4: dkh_check_call (every argument rule of a kernel call)
 * and the generated plugin_helpers_ops.h it reads. #ifdef DKH_HAS_CHECK_CALL. */

/* printf-format checking where the compiler supports it. */
#if defined(__GNUC__) || defined(__clang__)
#define DKH_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define DKH_PRINTF(fmt_index, first_arg)
#endif

/* ========================================================================== */
/*  The parts, by role                                                        */
/* ========================================================================== */
/* plugin_errors.h      the error object, Error_*, the generic argument checks
 * plugin_views.h       dtype sizes and names, tensor-view helpers
 * plugin_check_call.h  dkh_check_call (+ the generated plugin_helpers_ops.h)
 * Each is part of this header and included only from here, so a plugin keeps
 * including <devicekit/plugin_helpers.h> alone. The shared plugin runtime
 * (plugin_runtime.h, plugin_half.h, plugin_philox.h, plugin_runtime.hpp) is
 * separate and opt-in: see those headers. */
#include "plugin_errors.h"
#include "plugin_views.h"
#include "plugin_check_call.h"

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_PLUGIN_HELPERS_H_ */
