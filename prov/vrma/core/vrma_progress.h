// The domain's progress engine (vrma_progress.cpp), and the provider's
// serialization model: the whole of it, MSG, RDM and the shared core
// (DEVELOPERS.md has it as tables). Every lock is a CheckedMutex
// (src/fast_mutex.h) but RdmEp::lock and Conn::more_lock (FastMutex, also
// checked) and three plain std::mutex leaves (RdmPersister's, with its
// condition variables; the atomic executor's; MemMonitor's); the functions whose
// contract is "X held" assert it in lock-checked builds (VRMA_ASSERT_HELD:
// the sanitizer builds).
//
// Threads:
//  - the application: every call; with FI_PROGRESS_MANUAL all data
//    progress (CQ and counter reads, a full queue's reclaim).
//  - the domain's progress engine, one thread per domain (below): an RDM
//    endpoint's rdma_cm events always, and data progress with
//    FI_PROGRESS_AUTO (MSG CQs, RDM endpoints).
//  - per EQ (Eq::progress_thread): MSG rdma_cm events under Eq::lock (an
//    EQ belongs to the fabric, not to one domain).
//  - workers that block and so stay off the engine: PmemService (MSG
//    commits: the service CQ, msync, answers), RdmPersister (RDM commits),
//    MemMonitor (the registration cache's invalidations).
//
// Locks, what each guards, who takes it:
//  - Progress::lock: the engine's sources; held by its thread while it runs
//    a handler, so that a detach under it waits out a running handler.
//  - RdmEp::lock: everything of an RDM endpoint, its peers and connections
//    included (their send queues: Conn::tx_serialized, tx_lock not taken);
//    the data calls, CQ and counter reads (through RdmHooks), the engine's
//    handlers, fi_close. The RDM engine's own rules: vrma_rdm.h.
//  - Conn::tx_lock: an MSG connection's send side (slot ring head, signals,
//    dc_open, slot buffers); the transmit calls (TxGuard), the service
//    thread's answers. Skipped when the application serializes transmits
//    (Conn::tx_serialized): asserted as tx_lock_of(conn), which accepts
//    that, and an RDM connection's RdmEp::lock.
//  - Conn::more_lock: the FI_MORE chain; posters, and ep_cancel_held under
//    the EQ lock or a CQ lock (the connection ended). A leaf.
//  - Ep::rx_lock: the receive ring head, StagedRx; fi_recv, and the CQ
//    poller (staged pieces, reposts of vrma's own receives).
//  - Cq::lock: the pending queue, armed, reservations and the device CQ:
//    MSG handle_wc runs under it and retires send and receive slots (the
//    rings' tails). CQ reads, counters, a full send queue's reclaim, the
//    engine and the PmemService thread. RdmHooks::lock: a CQ's or
//    counter's list of RDM endpoints.
//  - Eq::lock: the EQ queue and its lingering endpoints (Eq::lingering);
//    rdma_cm events are handled under it (eq_handle_cm_event), the
//    lingering checked (eq_linger_check): the EQ thread, fi_eq_read,
//    fi_close.
//  - Cntr::lock: the feeding CQs, polled under it.
//  - PmemService::lock: served endpoints, retries; held by its thread for a
//    whole iteration. ServiceEp::lock (the commits table),
//    PmemService::jobs_lock: leaves.
//  - Domain::mr_lock: regions by key, descs, the key table (mr_persisted
//    waits on it); Domain::pmem_lock: starting and stopping the service;
//    MrCache::lock: RegCache calls and the monitor's invalidations;
//    Av::lock: the table.
//
// Lock order (outer -> inner; never the reverse):
//  - Progress::lock -> RdmEp::lock or Cq::lock; RdmHooks::lock ->
//    RdmEp::lock -> the leaves taken under it (Cq::lock, Domain::mr_lock
//    and the registration cache, the atomic executor's lock,
//    Domain::pmem_lock and RdmPersister's lock, Av::lock, more_lock). No
//    leaf is held while taking RdmEp::lock, and no endpoint, CQ, counter
//    or EQ lock while attaching to or detaching from the engine.
//  - PmemService::lock -> Conn::tx_lock -> Cq::lock -> Ep::rx_lock;
//    Cq::lock -> Eq::lock (a failed request's FI_SHUTDOWN);
//    Cntr::lock -> Cq::lock; PmemService::lock -> service CQ -> application
//    CQ (cq_push); Domain::pmem_lock -> PmemService::lock;
//    PmemService::lock or a CQ lock -> Domain::mr_lock; anything ->
//    Conn::more_lock, ServiceEp::lock, PmemService::jobs_lock. An MSG
//    transmit polls its send CQ only when the queue is full (Conn::reclaim,
//    tx lock held); fi_recv pushes a staged completion after releasing the
//    rx lock.
//
// The engine serves:
//  - FI_PROGRESS_AUTO MSG domains: each CQ's completion channel
//    (cq_progress_event, under Cq::lock);
//  - every RDM endpoint: its rdma_cm event channel (connections are made
//    and ended while the application calls nothing), and with
//    FI_PROGRESS_AUTO its internal CQ's completion channel, its kick
//    eventfd and a tick for the drain watch (under RdmEp::lock).
//
// The engine's contract:
//  - handlers run on the engine's thread with Progress's lock held, one at
//    a time; each takes its own object's lock. Lock order: Progress's lock
//    -> RdmEp::lock or Cq::lock. So never attach or detach with an
//    endpoint, CQ, counter or EQ lock held, nor from a handler.
//  - progress_detach returns once the handler is not running and never
//    will again: the object may then be torn down. Keys are never reused,
//    so an event read before a detach finds nothing.
//  - the thread starts at the first attach and stops at domain close
//    (every object is closed by then); a domain with nothing attached has
//    no thread.
#pragma once

#include "vrma_base.h"

namespace vrma {

struct Domain;

// Runs with the engine's lock held, on its thread.
using ProgressFn = void (*)(void *ctx) noexcept;

// The domain's engine, idle: no thread, no descriptor.
int progress_create(Domain *dom) noexcept;
// Runs fn(ctx) whenever fd is readable (fd >= 0) and, when tick_ms > 0,
// at least every tick_ms. Starts the thread at the first attach. Sets key
// (never 0); 0 or a negative FI_E* code (logged), key left 0.
int progress_attach(Domain *dom, int fd, int tick_ms, ProgressFn fn, void *ctx,
		    uint64_t &key) noexcept;
// Forgets key (0: nothing) and sets it to 0. See the contract above.
void progress_detach(Domain *dom, uint64_t &key) noexcept;

} // namespace vrma
