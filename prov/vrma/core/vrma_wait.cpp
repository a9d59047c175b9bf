// Wait objects shared by CQs and EQs: an epoll descriptor over the object's
// event sources, which the application may poll (FI_GETWAIT).
#include "vrma_base.h"

#include <sys/epoll.h>

namespace vrma {

Deadline::Deadline(int timeout_ms) noexcept
	: forever_(timeout_ms < 0),
	  end_(std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms))
{
}

int Deadline::remaining_ms() const noexcept
{
	if (forever_)
		return -1;
	auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
		end_ - std::chrono::steady_clock::now()).count();
	return left > 0 ? static_cast<int>(left) : 0;
}

int wait_epoll_create(Fd &epoll_fd, std::initializer_list<int> fds) noexcept
{
	epoll_fd.reset(epoll_create1(EPOLL_CLOEXEC));
	if (epoll_fd.get() < 0)
		return errno_to_fi(errno);
	for (int fd : fds) {
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.fd = fd;
		if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev))
			return errno_to_fi(errno);
	}
	return 0;
}

int wait_epoll(int epoll_fd, const Deadline &deadline, int *ready_fds, int max) noexcept
{
	epoll_event ev[4];
	int n = epoll_wait(epoll_fd, ev, std::min(max, 4), deadline.remaining_ms());
	if (n < 0)
		return errno == EINTR ? 0 : errno_to_fi(errno);
	for (int i = 0; i < n; i++)
		ready_fds[i] = ev[i].data.fd;
	return n;
}

int eventfd_signal(int fd) noexcept
{
	const uint64_t one = 1;
	if (write(fd, &one, sizeof one) == sizeof one)
		return 0;
	const int err = errno;
	VRMA_WARN(FI_LOG_CORE, "eventfd write: %s\n", strerror(err));
	return errno_to_fi(err);
}

void eventfd_clear(int fd) noexcept
{
	uint64_t value;
	if (read(fd, &value, sizeof value) < 0) {
		// EAGAIN: nothing was written, or another waiter cleared it first
	}
}

int wait_control(fi_wait_obj wait_obj, int epoll_fd, int command, void *arg,
		 const char *what) noexcept
{
	switch (command) {
	case FI_GETWAIT:
		if (!arg)
			return -FI_EINVAL;
		if (wait_obj != FI_WAIT_FD) {
			VRMA_WARN(FI_LOG_CORE, "FI_GETWAIT: the %s has no file descriptor wait object\n", what);
			return -FI_ENODATA;
		}
		*static_cast<int *>(arg) = epoll_fd;
		return 0;
	case FI_GETWAITOBJ:
		if (!arg)
			return -FI_EINVAL;
		*static_cast<fi_wait_obj *>(arg) = wait_obj;
		return 0;
	default:
		VRMA_WARN(FI_LOG_CORE, "fi_control(%s, %d) is not supported\n", what, command);
		return -FI_ENOSYS;
	}
}

fi_wait_obj wait_obj_resolve(fi_wait_obj requested) noexcept
{
	switch (requested) {
	case FI_WAIT_NONE:
	case FI_WAIT_FD:
		return requested;
	case FI_WAIT_UNSPEC:
		return FI_WAIT_FD;
	default:
		VRMA_WARN(FI_LOG_CORE, "wait object %d not supported (use FI_WAIT_FD)\n", requested);
		return FI_WAIT_SET; // the caller refuses it
	}
}

} // namespace vrma
