/* Streams, events and device synchronisation.
 *
 * This template runs every piece of work synchronously: a copy or kernel has
 * finished when its call returns. That is a valid implementation of the
 * stream contract (work on one stream runs in order; different streams may,
 * but need not, overlap), so streams here are just tags, every event is
 * reached the moment it is recorded, and synchronize has nothing to wait for.
 * Kernels report every error from the call itself, so there are never
 * asynchronous errors to hand back either.
 *
 * A device with real queues keeps these signatures and fills in the bodies:
 * Stream_Create makes a hardware queue, Event_Record enqueues a marker,
 * *_Synchronize waits and returns the first error the queue raised. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under strict -std=c11 */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "plugin.h"

#define LIVE_STREAM 0x5354524du /* "STRM": catches most use-after-destroy */
#define LIVE_EVENT 0x45564e54u  /* "EVNT" */

struct DK_Stream {
  uint32_t magic;
  int32_t device;
};

struct DK_Event {
  uint32_t magic;
  int32_t device;
  atomic_int recorded;   /* 0 until the first Event_Record */
  _Atomic int64_t when_ns; /* CLOCK_MONOTONIC at the last record */
};

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

DK_Error* plugin_check_stream(const char* call, const DK_Stream* s, int32_t device) {
  if (s == NULL || s->magic != LIVE_STREAM)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: stream %p is not a live stream; "
                     "expected one from Stream_Create, not yet destroyed",
                     call, (const void*)s);
  if (device >= 0 && s->device != device)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: stream %p belongs to " PLUGIN_NAME
                     ":%d; expected a stream of " PLUGIN_NAME ":%d",
                     call, (const void*)s, s->device, device);
  return NULL;
}

static DK_Error* check_event(const char* call, const char* what, const DK_Event* e) {
  if (e == NULL || e->magic != LIVE_EVENT)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s %p is not a live event; expected "
                     "one from Event_Create, not yet destroyed",
                     call, what, (const void*)e);
  return NULL;
}

DK_Error* plugin_Device_Synchronize(DK_Device_Synchronize_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Device_Synchronize";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Device_Synchronize_Args);
  return plugin_check_device(kCall, args->device); /* nothing is ever pending */
}

/* ---- Streams ------------------------------------------------------------------ */

DK_Error* plugin_Stream_Create(DK_Stream_Create_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Stream_Create";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Stream_Create_Args);
  DK_Error* e = plugin_check_device(kCall, args->device);
  if (e != NULL) return e;
  DK_Stream* s = malloc(sizeof(DK_Stream));
  if (s == NULL) return dkh_error(DK_ERROR_OUT_OF_MEMORY, "%s: out of host memory", kCall);
  s->magic = LIVE_STREAM;
  s->device = args->device;
  args->stream = s;
  return NULL;
}

DK_Error* plugin_Stream_Destroy(DK_Stream_Destroy_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Stream_Destroy";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Stream_Destroy_Args);
  DK_Error* e = plugin_check_stream(kCall, args->stream, -1);
  if (e != NULL) return e;
  args->stream->magic = 0;
  free(args->stream);
  return NULL;
}

DK_Error* plugin_Stream_Synchronize(DK_Stream_Synchronize_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Stream_Synchronize";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Stream_Synchronize_Args);
  return plugin_check_stream(kCall, args->stream, -1);
}

DK_Error* plugin_Stream_Query(DK_Stream_Query_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Stream_Query";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Stream_Query_Args);
  DK_Error* e = plugin_check_stream(kCall, args->stream, -1);
  if (e == NULL) args->idle = 1;
  return e;
}

DK_Error* plugin_Stream_WaitEvent(DK_Stream_WaitEvent_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Stream_WaitEvent";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Stream_WaitEvent_Args);
  DK_Error* e = plugin_check_stream(kCall, args->stream, -1);
  return e != NULL ? e : check_event(kCall, "event", args->event); /* already reached */
}

/* ---- Events ------------------------------------------------------------------- */

DK_Error* plugin_Event_Create(DK_Event_Create_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Event_Create";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Event_Create_Args);
  DK_Error* e = plugin_check_device(kCall, args->device);
  if (e != NULL) return e;
  DK_Event* ev = calloc(1, sizeof(DK_Event));
  if (ev == NULL) return dkh_error(DK_ERROR_OUT_OF_MEMORY, "%s: out of host memory", kCall);
  ev->magic = LIVE_EVENT;
  ev->device = args->device;
  args->event = ev;
  return NULL;
}

DK_Error* plugin_Event_Destroy(DK_Event_Destroy_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Event_Destroy";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Event_Destroy_Args);
  DK_Error* e = check_event(kCall, "event", args->event);
  if (e != NULL) return e;
  args->event->magic = 0;
  free(args->event);
  return NULL;
}

DK_Error* plugin_Event_Record(DK_Event_Record_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Event_Record";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Event_Record_Args);
  DK_Error* e = check_event(kCall, "event", args->event);
  if (e == NULL) e = plugin_check_stream(kCall, args->stream, args->event->device);
  if (e != NULL) return e;
  /* Everything enqueued so far has already run: the point is reached now. */
  atomic_store(&args->event->when_ns, now_ns());
  atomic_store(&args->event->recorded, 1);
  return NULL;
}

DK_Error* plugin_Event_Query(DK_Event_Query_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Event_Query";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Event_Query_Args);
  DK_Error* e = check_event(kCall, "event", args->event);
  if (e == NULL) args->reached = 1;
  return e;
}

DK_Error* plugin_Event_Synchronize(DK_Event_Synchronize_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Event_Synchronize";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Event_Synchronize_Args);
  return check_event(kCall, "event", args->event);
}

DK_Error* plugin_Event_ElapsedTime(DK_Event_ElapsedTime_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Event_ElapsedTime";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Event_ElapsedTime_Args);
  DK_Error* e = check_event(kCall, "start", args->start);
  if (e == NULL) e = check_event(kCall, "end", args->end);
  if (e != NULL) return e;
  if (!atomic_load(&args->start->recorded) || !atomic_load(&args->end->recorded))
    return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                     "%s: event '%s' was never recorded; "
                     "expected both events recorded. Hint: Event_Record both first.",
                     kCall, atomic_load(&args->start->recorded) ? "end" : "start");
  args->milliseconds =
      (double)(atomic_load(&args->end->when_ns) - atomic_load(&args->start->when_ns)) / 1e6;
  return NULL;
}
