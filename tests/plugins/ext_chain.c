/* A plugin whose extension chain (DK_Api.extension_start, the optional parts
 * since device API 1.5) is built one way per EXT_VARIANT, for the loader's
 * checks of that chain (tests/test_plugin_parts.py builds each variant):
 *   0  a valid 1.5 chain: collectives, an unknown type (skipped), graphs
 *   1  DK_Collectives with a struct_size smaller than DK_Collectives_STRUCT_SIZE
 *   2  DK_Collectives with a NULL Coll_Run
 *   3  DK_Collectives listed twice
 *   4  a chain that loops (an unknown type whose next is itself)
 *   5  only an unknown type: loads, no part
 *   6  a 1.4 plugin whose chain holds collectives: the part cannot exist
 *      before 1.5, so the SDK must not read it and reports it absent
 * The collectives functions are stubs that refuse every call: these tests
 * are about loading, not about running collectives. */
#ifndef BP_PLUGIN_NAME
#define BP_PLUGIN_NAME "ext_chain"
#endif
#ifndef EXT_VARIANT
#define EXT_VARIANT 0
#endif
#include "bad_plugin_common.h"

#define EXT_STUB(fn)                                                                \
  static DK_Error* ext_##fn(DK_##fn##_Args* a) {                                    \
    (void)a;                                                                        \
    return dkh_error(DK_ERROR_UNIMPLEMENTED, BP_PLUGIN_NAME ": " #fn " is a stub"); \
  }
EXT_STUB(Comm_GetUniqueId)
EXT_STUB(Comm_Init)
EXT_STUB(Comm_Destroy)
EXT_STUB(Comm_Abort)
EXT_STUB(Coll_Run)
EXT_STUB(Coll_Group)
EXT_STUB(Graph_Capture)
EXT_STUB(Graph_Launch)
EXT_STUB(Graph_Destroy)

#define EXT_COLLECTIVES(size, next, run)       \
  {{(size), DK_EXTENSION_COLLECTIVES, (next)}, \
   ~(uint64_t)0,                               \
   DK_DTYPE_MASK_ALL_1_0,                      \
   0x1f,                                       \
   ext_Comm_GetUniqueId,                       \
   ext_Comm_Init,                              \
   ext_Comm_Destroy,                           \
   ext_Comm_Abort,                             \
   (run),                                      \
   ext_Coll_Group}

static DK_Graphs graphs = {{DK_Graphs_STRUCT_SIZE, DK_EXTENSION_GRAPHS, NULL},
                           ext_Graph_Capture,
                           ext_Graph_Launch,
                           ext_Graph_Destroy};
static DK_Extension_Base unknown = {DK_Extension_Base_STRUCT_SIZE, 99, NULL};

#if EXT_VARIANT == 1
static DK_Collectives coll =
    EXT_COLLECTIVES(DK_STRUCT_SIZE(DK_Collectives, Coll_Run), NULL, ext_Coll_Run);
#elif EXT_VARIANT == 2
static DK_Collectives coll = EXT_COLLECTIVES(DK_Collectives_STRUCT_SIZE, NULL, NULL);
#else
static DK_Collectives coll = EXT_COLLECTIVES(DK_Collectives_STRUCT_SIZE, NULL, ext_Coll_Run);
#endif
static DK_Collectives coll2 = EXT_COLLECTIVES(DK_Collectives_STRUCT_SIZE, NULL, ext_Coll_Run);

#if EXT_VARIANT == 6
static DK_Api kApi = BP_API_DEFAULT(DK_Api_STRUCT_SIZE_1_4, 1, 4);
#else
static DK_Api kApi = BP_API_DEFAULT(DK_Api_STRUCT_SIZE_1_5, 1, 5);
#endif

DK_EXPORT const DK_Api* DK_GetApi(void) {
  const DK_Extension_Base* start = &coll.base;
  switch (EXT_VARIANT) {
    case 0:
      coll.base.next = &unknown;
      unknown.next = &graphs.base;
      break;
    case 3: coll.base.next = &coll2.base; break;
    case 4:
      coll.base.next = &unknown;
      unknown.next = &unknown;
      break;
    case 5: start = &unknown; break;
    default: break;
  }
  kApi.extension_start = start;
  return &kApi;
}
