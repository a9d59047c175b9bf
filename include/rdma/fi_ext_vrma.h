/*
 * fi_ext_vrma.h: public extensions of the vrma libfabric provider.
 *
 * Applications include this header next to <rdma/fabric.h> to recognise the
 * provider and to use its extensions. Every extension is optional: an
 * application that never includes this header works with vrma unchanged.
 */
#ifndef FI_EXT_VRMA_H
#define FI_EXT_VRMA_H

#include <stddef.h>
#include <stdint.h>

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

/*
 * Persistent memory (FI_RMA_PMEM, FI_COMMIT_COMPLETE).
 *
 * A write with FI_COMMIT_COMPLETE completes only once its data is durable at
 * the target. vrma picks one method per connection, from what the target
 * announced while connecting; fi_getopt(ep, FI_OPT_ENDPOINT,
 * FI_VRMA_OPT_COMMIT_METHOD, &int, &len) reports it once connected.
 */
#define FI_PROV_SPECIFIC_VRMA (0x7e3 << 16)

/* fi_ep_attr::protocol of vrma's native FI_EP_RDM endpoint (reliable
 * datagrams over on-demand RC connections; see fi_vrma(7)). The top bit
 * marks a provider's own value (1.x headers call it FI_PROV_SPECIFIC; 2.x
 * headers no longer name it). */
#define FI_PROTO_VRMA_RDM (0x80000000U | FI_PROV_SPECIFIC_VRMA | 1)

enum {
	/* int: an enum fi_vrma_commit_method value (connected endpoints) */
	FI_VRMA_OPT_COMMIT_METHOD = -(FI_PROV_SPECIFIC_VRMA),
	/* struct fi_vrma_rdm_conn_stats (FI_EP_RDM endpoints; fi_getopt only) */
	FI_VRMA_OPT_RDM_CONN_STATS = -(FI_PROV_SPECIFIC_VRMA) - 1,
};

/* What an RDM endpoint holds for its peers, and what it gave back. */
struct fi_vrma_rdm_conn_stats {
	uint64_t peers;       /* peers in its table (FI_VRMA_RDM_MAX_PEERS) */
	uint64_t connections; /* connections up or being made (one queue pair each) */
	uint64_t closing;     /* ended connections whose queue pairs are not freed yet */
	uint64_t idle_closed; /* connections closed unused (FI_VRMA_RDM_IDLE_TIMEOUT),
			       * asked by either side, in the endpoint's life */
	uint64_t peers_given_back; /* peers without a connection given back, in its life */
};

enum fi_vrma_commit_method {
	/* The peer offers no way to make writes durable: FI_COMMIT_COMPLETE
	 * operations fail with -FI_EOPNOTSUPP. */
	FI_VRMA_COMMIT_NONE = 0,
	/* Native RDMA FLUSH to the persistence domain (IBTA 1.5). Reserved:
	 * not built with rdma-core < 45. */
	FI_VRMA_COMMIT_NATIVE_FLUSH = 1,
	/* The target declared that RDMA writes land in its persistence domain
	 * (fi_vrma_domain_ops.set_direct_write_to_pmem): a small RDMA READ of
	 * the written bytes after the writes proves durability. */
	FI_VRMA_COMMIT_DIRECT_WRITE = 2,
	/* A commit message after the writes: the target's progress thread
	 * persists each range (CLWB/CLFLUSHOPT/CLFLUSH + SFENCE, or msync for
	 * file-backed shared mappings) and answers; the answer completes the
	 * operation. The target application need not call anything. */
	FI_VRMA_COMMIT_TARGET = 3,
};

/* What a domain's commit service did (target side). */
struct fi_vrma_commit_stats {
	uint64_t requests;     /* commit messages served */
	uint64_t ranges;       /* address ranges persisted */
	uint64_t bytes;        /* bytes in those ranges */
	uint64_t msync_calls;  /* ranges persisted with msync(MS_SYNC) */
	uint64_t cache_flushes; /* ranges written back by cache-line flushes */
	uint64_t failures;     /* requests answered with an error */
	const char *cache_flush; /* "clwb", "clflushopt", "clflush" or "none" */
};

/* A domain's registration cache of application buffers (RDM rendezvous
 * transfers with desc NULL; FI_VRMA_MR_CACHE*). */
struct fi_vrma_mr_cache_stats {
	int active;             /* 1: caching, with a userfaultfd memory monitor;
				 * 0: off or not started yet (FI_LOG_LEVEL=info says why) */
	uint64_t hits;          /* transfers served by a cached registration */
	uint64_t misses;        /* lookups that registered */
	uint64_t invalidations; /* cached registrations dropped because their
				 * memory was unmapped, released or remapped */
	uint64_t evictions;     /* unused registrations dropped for the limits */
	uint64_t entries;       /* registrations cached now */
	uint64_t bytes;         /* bytes they cover */
	uint64_t uncached;      /* registrations made for one transfer only (cache
				 * off, or memory the monitor cannot watch) */
};

/* A domain's RMA counters (FI_EP_MSG endpoints). */
struct fi_vrma_rma_stats {
	uint64_t read_backs; /* zero-length reads posted to prove delivery
			      * (FI_DELIVERY_COMPLETE writes; one proves
			      * a whole FI_MORE chain of them) */
};

/* A domain's registrations on demand (FI_VRMA_MR_ON_DEMAND): regions
 * fi_mr_reg found mostly untouched and left unregistered with the device
 * until their first device use (a peer's RDMA, a local MSG operation). */
struct fi_vrma_mr_stats {
	uint64_t on_demand;  /* regions registered on demand */
	uint64_t registered; /* of those, registered with the device since */
};

/* fi_open_ops(&domain->fid, FI_VRMA_DOMAIN_OPS, 0, (void **)&ops, NULL) */
#define FI_VRMA_DOMAIN_OPS "vrma_domain_ops_v1"

struct fi_vrma_domain_ops {
	size_t size;
	/* Declares (enable != 0) that RDMA writes into this domain's memory
	 * land in the persistence domain directly (the platform places
	 * inbound DMA in persistent memory: no DDIO, or eADR). Endpoints that
	 * connect afterwards tell their peers, who then commit by read-back.
	 * Declaring it falsely loses data on power failure. */
	int (*set_direct_write_to_pmem)(struct fid_domain *domain, int enable);
	/* Copies the domain's commit-service counters. */
	int (*commit_stats)(struct fid_domain *domain, struct fi_vrma_commit_stats *stats);
	/* Copies the domain's registration-cache counters. Present when size
	 * covers it (added in vrma 0.1 after commit_stats). */
	int (*mr_cache_stats)(struct fid_domain *domain, struct fi_vrma_mr_cache_stats *stats);
	/* Copies the domain's RMA counters. Present when size covers it
	 * (added after mr_cache_stats). */
	int (*rma_stats)(struct fid_domain *domain, struct fi_vrma_rma_stats *stats);
	/* Copies the domain's registration-on-demand counters. Present when
	 * size covers it (added after rma_stats). */
	int (*mr_stats)(struct fid_domain *domain, struct fi_vrma_mr_stats *stats);
};

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_VRMA_H */
