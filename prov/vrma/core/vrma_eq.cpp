// Event queues: connection-management events (translated from the rdma_cm
// channel of the endpoints bound to it) and application-written events.
#include "vrma_msg_ep.h"

#include <cstdio>
#include <fcntl.h>
#include <sys/eventfd.h>

namespace vrma {

namespace {

// Reads every pending rdma_cm event (lock held). An event must be acked
// after its private data was copied; a connection request vrma refuses is
// destroyed only after its event was acked (rdma_destroy_id waits for it).
void progress(Eq *eq)
{
	VRMA_ASSERT_HELD(eq->lock);
	if (!eq->channel)
		return;
	rdma_cm_event *ev = nullptr;
	while (rdma_get_cm_event(eq->channel.get(), &ev) == 0) {
		rdma_cm_id *refused = eq_handle_cm_event(eq, ev);
		rdma_ack_cm_event(ev);
		if (refused)
			rdma_destroy_id(refused);
	}
	eq_linger_check(eq);
}

// The EQ's control-progress thread: reads rdma_cm events as they arrive and
// wakes waiters through event_fd.
void progress_loop(Eq *eq)
{
	Fd ep_fd;
	if (int rc = wait_epoll_create(ep_fd, {eq->channel->fd, eq->stop_fd.get(), eq->kick_fd.get()})) {
		VRMA_WARN(FI_LOG_EQ, "EQ progress thread: %s\n", fi_strerror(-rc));
		return;
	}
	// While endpoints linger (Eq::lingering), a tick checks their sends.
	constexpr int kLingerTickMs = 2;
	bool ticking = false;
	for (;;) {
		int ready[3];
		int n = wait_epoll(ep_fd.get(), Deadline(ticking ? kLingerTickMs : -1), ready, 3);
		if (n < 0) {
			VRMA_WARN(FI_LOG_EQ, "EQ progress thread: %s\n", fi_strerror(-n));
			return;
		}
		for (int i = 0; i < n; i++) {
			if (ready[i] == eq->stop_fd.get())
				return;
			if (ready[i] == eq->kick_fd.get())
				eventfd_clear(eq->kick_fd.get());
		}
		bool have;
		{
			std::lock_guard guard(eq->lock);
			progress(eq);
			ticking = !eq->lingering.empty();
			have = !eq->queue.empty();
		}
		if (have)
			eventfd_signal(eq->event_fd.get());
	}
}

void free_entry(EqEntry &e)
{
	if (e.info) {
		// An undelivered connection request: refuse it and drop the handle.
		auto *cr = static_cast<ConnReq *>(e.info->handle);
		if (cr && cr->id) {
			rdma_reject(cr->id, nullptr, 0);
			rdma_destroy_id(cr->id);
		}
		delete cr;
		e.info->handle = nullptr;
		fi_freeinfo(e.info);
		e.info = nullptr;
	}
}

ssize_t eq_read(fid_eq *f, uint32_t *event, void *buf, size_t len, uint64_t flags) noexcept
{
	Eq *eq = static_cast<Eq *>(f);
	if (!event) {
		VRMA_WARN(FI_LOG_EQ, "fi_eq_read: NULL event pointer\n");
		return -FI_EINVAL;
	}
	std::lock_guard guard(eq->lock);
	progress(eq);
	if (eq->queue.empty())
		return -FI_EAGAIN;
	EqEntry &e = eq->queue.front();
	if (e.is_error)
		return -FI_EAVAIL;
	if (len < e.data.size()) {
		VRMA_WARN(FI_LOG_EQ, "fi_eq_read: buffer of %zu bytes, event needs %zu\n", len,
			  e.data.size());
		return -FI_ETOOSMALL;
	}
	if (!buf && !e.data.empty())
		return -FI_EINVAL;
	*event = e.event;
	if (!e.data.empty())
		memcpy(buf, e.data.data(), e.data.size());
	ssize_t n = static_cast<ssize_t>(e.data.size());
	if (!(flags & FI_PEEK)) {
		e.info = nullptr; // now the application's
		eq->queue.pop_front();
	}
	return n;
}

ssize_t eq_readerr(fid_eq *f, fi_eq_err_entry *buf, uint64_t flags) noexcept
{
	Eq *eq = static_cast<Eq *>(f);
	if (!buf) {
		VRMA_WARN(FI_LOG_EQ, "fi_eq_readerr: NULL buffer\n");
		return -FI_EINVAL;
	}
	std::lock_guard guard(eq->lock);
	progress(eq);
	if (eq->queue.empty() || !eq->queue.front().is_error)
		return -FI_EAGAIN;
	EqEntry &e = eq->queue.front();
	// Before API 1.5 the entry ends at err_data (the provider's storage):
	// err_data_size is past the caller's structure, neither read nor written.
	const bool legacy = eq->fabric->api_version < abi::kV1_5;
	void *user_data = nullptr;
	size_t user_size = 0;
	if (legacy) {
		memcpy(buf, &e.err, offsetof(fi_eq_err_entry, err_data));
	} else {
		user_data = buf->err_data;
		user_size = buf->err_data_size;
		*buf = e.err;
	}
	if (user_data && user_size) {
		// The caller supplied the buffer (API >= 1.5).
		size_t n = std::min(user_size, e.data.size());
		memcpy(user_data, e.data.data(), n);
		buf->err_data = user_data;
		buf->err_data_size = n;
	} else {
		// Provider storage, valid until the next fi_eq_readerr.
		eq->last_err_data = std::move(e.data);
		buf->err_data = eq->last_err_data.empty() ? nullptr : eq->last_err_data.data();
		if (!legacy)
			buf->err_data_size = eq->last_err_data.size();
	}
	if (!(flags & FI_PEEK))
		eq->queue.pop_front();
	return sizeof(fi_eq_err_entry);
}

ssize_t eq_write(fid_eq *f, uint32_t event, const void *buf, size_t len, uint64_t flags) noexcept
try {
	Eq *eq = static_cast<Eq *>(f);
	if (!buf && len) {
		VRMA_WARN(FI_LOG_EQ, "fi_eq_write: NULL buffer of length %zu\n", len);
		return -FI_EINVAL;
	}
	(void)flags;
	EqEntry e;
	e.event = event;
	e.data.assign(static_cast<const uint8_t *>(buf), static_cast<const uint8_t *>(buf) + len);
	eq_post(eq, std::move(e));
	return static_cast<ssize_t>(len);
} catch (...) {
	return -FI_ENOMEM;
}

ssize_t eq_sread(fid_eq *f, uint32_t *event, void *buf, size_t len, int timeout,
		 uint64_t flags) noexcept
{
	Eq *eq = static_cast<Eq *>(f);
	if (eq->wait_obj == FI_WAIT_NONE) {
		VRMA_WARN(FI_LOG_EQ, "fi_eq_sread on an EQ opened with FI_WAIT_NONE\n");
		return -FI_ENOSYS;
	}
	const Deadline deadline(timeout);
	for (;;) {
		ssize_t r = eq_read(f, event, buf, len, flags);
		if (r != -FI_EAGAIN)
			return r;
		if (deadline.expired())
			return -FI_EAGAIN;
		int ready[2];
		int n = wait_epoll(eq->epoll_fd.get(), deadline, ready, 2);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++)
			if (ready[i] == eq->event_fd.get())
				eventfd_clear(eq->event_fd.get());
	}
}

const char *eq_strerror(fid_eq *, int prov_errno, const void *, char *buf, size_t len) noexcept
{
	static thread_local char local[96];
	char *out = buf && len ? buf : local;
	size_t n = buf && len ? len : sizeof local;
	if (prov_errno < 0)
		std::snprintf(out, n, "%s", strerror(-prov_errno));
	else
		std::snprintf(out, n, "rdma_cm status %d", prov_errno);
	return out;
}

int eq_close(fid *f) noexcept
{
	Eq *eq = from_fid<Eq>(f);
	if (eq->refs.load()) {
		VRMA_WARN(FI_LOG_EQ, "EQ still bound to %d endpoints or AVs\n", eq->refs.load());
		return -FI_EBUSY;
	}
	if (eq->progress_thread.joinable()) {
		eventfd_signal(eq->stop_fd.get());
		eq->progress_thread.join();
	}
	{
		std::lock_guard guard(eq->lock);
		progress(eq);
		for (EqEntry &e : eq->queue)
			free_entry(e);
		eq->queue.clear();
	}
	eq->fabric->refs--;
	delete eq;
	return 0;
}

int eq_control(fid *f, int command, void *arg) noexcept
{
	Eq *eq = from_fid<Eq>(f);
	return wait_control(eq->wait_obj, eq->epoll_fd.get(), command, arg, "EQ");
}

constexpr fi_ops eq_fi_ops = {
	.size = sizeof(fi_ops),
	.close = eq_close,
	.bind = fid_no_bind,
	.control = eq_control,
	.ops_open = fid_no_ops_open,
	.tostr = fid_tostr,
	.ops_set = fid_no_ops_set,
};

constexpr fi_ops_eq eq_ops = {
	.size = sizeof(fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = eq_strerror,
};

} // namespace

int eq_trywait(Eq *eq) noexcept
{
	if (eq->wait_obj == FI_WAIT_NONE) {
		VRMA_WARN(FI_LOG_EQ, "fi_trywait on an EQ without a wait object\n");
		return -FI_EINVAL;
	}
	std::lock_guard guard(eq->lock);
	progress(eq);
	if (!eq->queue.empty())
		return -FI_EAGAIN;
	eventfd_clear(eq->event_fd.get());
	return 0;
}

void eq_post(Eq *eq, EqEntry &&entry)
{
	{
		std::lock_guard guard(eq->lock);
		eq->queue.push_back(std::move(entry));
	}
	eventfd_signal(eq->event_fd.get());
}

void eq_purge(Eq *eq, fid *source) noexcept
{
	std::lock_guard guard(eq->lock);
	progress(eq);
	for (auto it = eq->queue.begin(); it != eq->queue.end();) {
		if (it->source == source) {
			free_entry(*it);
			it = eq->queue.erase(it);
		} else {
			++it;
		}
	}
}

int eq_open(fid_fabric *fabric, fi_eq_attr *attr, fid_eq **eq_out, void *context) noexcept
try {
	if (!fabric || !attr || !eq_out) {
		VRMA_WARN(FI_LOG_EQ, "fi_eq_open: NULL fabric, attribute or output\n");
		return -FI_EINVAL;
	}
	const fi_wait_obj wait = wait_obj_resolve(attr->wait_obj);
	if (wait == FI_WAIT_SET)
		return -FI_ENOSYS;
	if (attr->flags & ~static_cast<uint64_t>(FI_WRITE)) {
		VRMA_WARN(FI_LOG_EQ, "fi_eq_open: unsupported flags 0x%llx\n",
			  static_cast<unsigned long long>(attr->flags));
		return -FI_EBADFLAGS;
	}
	auto eq = std::make_unique<Eq>();
	eq->fabric = from_fid<Fabric>(&fabric->fid);
	eq->wait_obj = wait;
	eq->channel.reset(rdma_create_event_channel());
	if (!eq->channel) {
		int err = errno;
		VRMA_WARN(FI_LOG_EQ, "rdma_create_event_channel: %s\n", strerror(err));
		return errno_to_fi(err);
	}
	int fl = fcntl(eq->channel->fd, F_GETFL);
	if (fl < 0 || fcntl(eq->channel->fd, F_SETFL, fl | O_NONBLOCK))
		return errno_to_fi(errno);
	eq->event_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (eq->event_fd.get() < 0)
		return errno_to_fi(errno);
	if (wait == FI_WAIT_FD) {
		if (int rc = wait_epoll_create(eq->epoll_fd, {eq->channel->fd, eq->event_fd.get()}))
			return rc;
	}
	eq->stop_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (eq->stop_fd.get() < 0)
		return errno_to_fi(errno);
	eq->kick_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (eq->kick_fd.get() < 0)
		return errno_to_fi(errno);
	eq->progress_thread = std::thread(progress_loop, eq.get());
	eq->fid.fclass = FI_CLASS_EQ;
	eq->fid.context = context;
	eq->fid.ops = const_cast<fi_ops *>(&eq_fi_ops);
	eq->ops = const_cast<fi_ops_eq *>(&eq_ops);
	eq->fabric->refs++;
	*eq_out = eq.release();
	return 0;
} catch (...) {
	return -FI_ENOMEM;
}

} // namespace vrma
