/* The plugin's two tables and its one exported symbol: written from the
 * .def rows by <devicekit/plugin_tables.h> (designated initializers, so this
 * file is C). The same file serves both builds (real CUDA and the emulator):
 * only Plugin_GetInfo's name differs. Which rows: api.h. */
#define DKH_TABLES_DEFINE
#include "api.h"
