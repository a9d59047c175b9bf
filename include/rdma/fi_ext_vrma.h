/*
 * fi_ext_vrma.h: public extensions of the vrma libfabric provider.
 *
 * Applications include this header next to <rdma/fabric.h> to recognise the
 * provider and to use its extensions. Every extension is optional: an
 * application that never includes this header works with vrma unchanged.
 */
#ifndef FI_EXT_VRMA_H
#define FI_EXT_VRMA_H

#include <rdma/fabric.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The provider's name as fi_info::fabric_attr->prov_name reports it. */
#define FI_VRMA_PROV_NAME "vrma"

/* The provider version (fabric_attr->prov_version) of this header. */
#define FI_VRMA_VERSION FI_VERSION(0, 1)

/*
 * Bytes of connection data an application may pass to fi_connect, fi_accept
 * and fi_reject (also reported by fi_getopt(FI_OPT_CM_DATA_SIZE)).
 */
#define FI_VRMA_CM_DATA_SIZE 52

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_VRMA_H */
