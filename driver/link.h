/* link.h: writing the CPU backend's object file and linking model.so (link.c). Both report errors
 * through diag and return false. */
#ifndef SNN_DRIVER_LINK_H
#define SNN_DRIVER_LINK_H

#include <stdbool.h>

#include "codegen/kir.h"

/* The relocatable object of kp for LLVM CPU `cpu` (NULL: the host; weights embedded from kp->m if embed_weights; they must be bound). */
bool link_emit_object(const KProgram *kp, const char *cpu, const char *path, bool embed_weights);
/* model.so at out: the object linked with the model runtime by $CC (default cc). */
bool link_shared_library(const KProgram *kp, const char *cpu, const char *out,
                         bool embed_weights);

#endif
