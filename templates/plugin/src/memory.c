/* Device memory: allocation with exact statistics and a hard limit, and copies.
 *
 * "Device memory" here is host memory. Each allocation carries a small header
 * in front of the pointer handed out (magic, size, device), so Memory_Free can
 * refuse pointers it never gave out and the statistics stay exact. On real
 * hardware, replace the body of allocate/free/copy with your driver's calls
 * and keep the bookkeeping: the conformance suite checks the statistics. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

#define LIVE_MAGIC 0x6c697665646b6d6dull /* "livedkmm" */
#define FREED_MAGIC 0x66726565646b6d6dull

/* PLUGIN_ALIGNMENT bytes in front of every allocation, so the pointer handed
 * out keeps the alignment. */
typedef struct BlockHeader {
  uint64_t magic;
  size_t size; /* bytes requested: what the statistics count */
  int32_t device;
} BlockHeader;
_Static_assert(sizeof(BlockHeader) <= PLUGIN_ALIGNMENT, "header must fit in front");

typedef struct DeviceMemory { uint64_t bytes_in_use, peak_bytes_in_use, num_allocs; } DeviceMemory;

/* One lock for every device's counters: allocation is not a hot path (the
 * SDK caches blocks), and readers get one consistent snapshot. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static DeviceMemory memory[PLUGIN_NUM_DEVICES];

static BlockHeader* header_of(void* ptr) {
  return (BlockHeader*)((unsigned char*)ptr - PLUGIN_ALIGNMENT);
}

DK_Error* plugin_Device_MemoryStats(DK_Device_MemoryStats_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Device_MemoryStats";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Device_MemoryStats_Args);
  DK_Error* e = plugin_check_device(kCall, args->device);
  if (e != NULL) return e;
  DeviceMemory* m = &memory[args->device];
  pthread_mutex_lock(&mu);
  args->bytes_in_use = m->bytes_in_use;
  args->peak_bytes_in_use = m->peak_bytes_in_use;
  args->num_allocs = m->num_allocs;
  pthread_mutex_unlock(&mu);
  return NULL;
}

DK_Error* plugin_Memory_Allocate(DK_Memory_Allocate_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Memory_Allocate";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Memory_Allocate_Args);
  args->ptr = NULL;
  DK_Error* e = plugin_check_device(kCall, args->device);
  if (e != NULL || args->size == 0) return e; /* size 0: ptr NULL, no error (header) */
  DeviceMemory* m = &memory[args->device];

  /* Reserve first, under the lock, so two threads cannot both fit into the
   * last free bytes; give the reservation back if the host says no. */
  pthread_mutex_lock(&mu);
  const uint64_t available = plugin_total_memory - m->bytes_in_use;
  const int fits = args->size <= available;
  if (fits) {
    m->bytes_in_use += args->size;
    m->num_allocs += 1;
    if (m->bytes_in_use > m->peak_bytes_in_use) m->peak_bytes_in_use = m->bytes_in_use;
  }
  pthread_mutex_unlock(&mu);
  if (!fits)
    return dkh_error(
        DK_ERROR_OUT_OF_MEMORY,
        "%s: cannot allocate %zu bytes on " PLUGIN_NAME
        ":%d; %llu of %llu "
        "bytes are free. Hint: free tensors, empty the SDK's cache, or raise " PLUGIN_MEMORY_ENV
        ".",
        kCall, args->size, args->device, (unsigned long long)available,
        (unsigned long long)plugin_total_memory);

  /* aligned_alloc wants a multiple of the alignment. */
  const size_t body = (args->size + PLUGIN_ALIGNMENT - 1) / PLUGIN_ALIGNMENT * PLUGIN_ALIGNMENT;
  unsigned char* base =
      body < args->size ? NULL : aligned_alloc(PLUGIN_ALIGNMENT, PLUGIN_ALIGNMENT + body);
  if (base == NULL) {
    pthread_mutex_lock(&mu);
    m->bytes_in_use -= args->size;
    m->num_allocs -= 1;
    pthread_mutex_unlock(&mu);
    return dkh_error(DK_ERROR_OUT_OF_MEMORY,
                     "%s: the host refused %zu bytes for " PLUGIN_NAME ":%d", kCall, args->size,
                     args->device);
  }
  BlockHeader* h = (BlockHeader*)base;
  h->magic = LIVE_MAGIC;
  h->size = args->size;
  h->device = args->device;
  args->ptr = base + PLUGIN_ALIGNMENT;
  return NULL;
}

DK_Error* plugin_Memory_Free(DK_Memory_Free_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Memory_Free";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Memory_Free_Args);
  DK_Error* e = plugin_check_device(kCall, args->device);
  if (e != NULL || args->ptr == NULL) return e; /* NULL: no-op (header) */
  /* Best effort: reads the header in front of a pointer we may never have
   * handed out. Catches interior pointers, double frees and wrong devices in
   * practice; a real driver validates against its own allocation table. */
  BlockHeader* h = header_of(args->ptr);
  if (((uintptr_t)args->ptr % PLUGIN_ALIGNMENT) != 0 || h->magic != LIVE_MAGIC ||
      h->device != args->device)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %p is not a live allocation of " PLUGIN_NAME
                     ":%d; expected a "
                     "pointer from Memory_Allocate on that device, not yet freed. Hint: "
                     "look for a double free or a view offset into a buffer.",
                     kCall, args->ptr, args->device);
  DeviceMemory* m = &memory[args->device];
  pthread_mutex_lock(&mu);
  m->bytes_in_use -= h->size;
  m->num_allocs -= 1;
  pthread_mutex_unlock(&mu);
  h->magic = FREED_MAGIC;
  free(h);
  return NULL;
}

DK_Error* plugin_Memcpy(DK_Memcpy_Args* args) {
  static const char* const kCall = PLUGIN_NAME ".Memcpy";
  PLUGIN_CHECK_ARGS(kCall, args, DK_Memcpy_Args);
  DK_Error* e = plugin_check_device(kCall, args->device);
  if (e != NULL) return e;
  if (args->kind != DK_COPY_HOST_TO_DEVICE && args->kind != DK_COPY_DEVICE_TO_HOST &&
      args->kind != DK_COPY_DEVICE_TO_DEVICE)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: kind is %d; expected 0 (host to "
                     "device), 1 (device to host) or 2 (device to device)",
                     kCall, (int)args->kind);
  if (args->stream != NULL && (e = plugin_check_stream(kCall, args->stream, args->device)))
    return e;
  if (args->size == 0) return NULL;
  if (args->dst == NULL || args->src == NULL)
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: %s is NULL with size %zu; NULL is "
                     "allowed only when size is 0",
                     kCall, args->dst ? "src" : "dst", args->size);
  /* With or without a stream the copy is done before we return: streams run
   * synchronously (stream.c), so "enqueued and ordered" holds trivially. An
   * asynchronous device enqueues a DMA here when args->stream != NULL. */
  memcpy(args->dst, args->src, args->size);
  return NULL;
}
