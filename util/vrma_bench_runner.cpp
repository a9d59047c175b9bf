// vrma_bench: what the RMA module (vrma_bench_rma.cpp) and the two-sided
// module (vrma_bench_twosided.cpp) share: a side's fabric objects
// (Endpoint), the roles (server, client, loopback) and the measuring of one
// size (ClientRunner).

#include "vrma_bench.h"

#include <unistd.h>

#include <cstring>
#include <exception>
#include <thread>

namespace vrma_bench {

int guarded(const char *who, const std::function<int()> &body)
{
	try {
		return body();
	} catch (const BenchError &e) {
		return e.status;
	} catch (const std::exception &e) {
		fprintf(stderr, "vrma_bench: %s: %s\n", who, e.what());
		g_abort.store(true);
		return kExitError;
	} catch (...) {
		fprintf(stderr, "vrma_bench: %s: unexpected error\n", who);
		g_abort.store(true);
		return kExitError;
	}
}

// ---------------------------------------------------------------- Endpoint

void Endpoint::open_fabric(const fi_info *info, bool with_eq)
{
	int rc = fi_fabric(info->fabric_attr, fabric_.out(), nullptr);
	if (rc)
		fail_call("fi_fabric", rc);
	if (!with_eq)
		return;
	fi_eq_attr attr{};
	attr.size = 64;
	attr.wait_obj = FI_WAIT_UNSPEC;
	rc = fi_eq_open(fabric_.get(), &attr, eq_.out(), nullptr);
	if (rc)
		fail_call("fi_eq_open", rc);
}

void Endpoint::open_passive()
{
	int rc = fi_passive_ep(fabric_.get(), info_.get(), pep_.out(), nullptr);
	if (rc)
		fail_call("fi_passive_ep", rc);
	rc = fi_pep_bind(pep_.get(), &eq_.get()->fid, 0);
	if (rc)
		fail_call("fi_pep_bind", rc);
}

size_t Endpoint::alloc_region(size_t bytes)
{
	const size_t len = (bytes + 4095) / 4096 * 4096;
	region_.reset(static_cast<uint8_t *>(aligned_alloc(4096, len)));
	if (!region_)
		fail(kExitError, "cannot allocate %zu bytes", len);
	base_ = region_.get();
	memset(base_, 0, len);
	return len;
}

void Endpoint::init_slots(size_t tx, size_t rx)
{
	tx_slots_.assign(tx, Slot{});
	free_tx_.clear();
	for (size_t i = tx; i > 0; --i)
		free_tx_.push_back(i - 1);
	rx_slots_.assign(rx, Slot{});
}

void Endpoint::close_fabric()
{
	ep_.reset();
	pep_.reset();
	mr_.reset();
	region_.reset();
	av_.reset();
	cntr_.reset();
	cq_.reset();
	domain_.reset();
	eq_.reset();
	fabric_.reset();
}

std::string Endpoint::read_cq_error(fi_cq_err_entry &err)
{
	err = fi_cq_err_entry{};
	const ssize_t rc = fi_cq_readerr(cq_.get(), &err, 0);
	if (rc < 0)
		fail_call("fi_cq_readerr", rc);
	char buf[256] = "";
	const char *prov = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buf, sizeof buf);
	return prov ? prov : "-";
}

// ---------------------------------------------------------------- ClientRunner

ClientRunner::ClientRunner(const Options &opt)
	: progress_line_(opt.progress || isatty(STDERR_FILENO)), options_(opt)
{
}

Row ClientRunner::measure(size_t size, size_t index)
{
	Row row;
	row.size = size;
	if (std::optional<std::string> why = skip_reason(size)) {
		row.skipped = true;
		row.note = std::move(*why);
		return row;
	}
	const uint8_t salt = static_cast<uint8_t>(0x11 + 0x3b * index);
	prepare(size, salt);

	// bw and rate, unless --warmup says otherwise: one window first, so
	// that every buffer of the receiver's pool has been used once
	// (registration caches warm, as perftest's pre-registered buffers are)
	// before calibration and the timed run.
	if (!lat() && options_.warmup < 0)
		run(size, window_, nullptr, false);
	uint64_t iterations = options_.iterations;
	if (!iterations)
		iterations = calibrate(size);
	const uint64_t warmup = options_.warmup >= 0 ? static_cast<uint64_t>(options_.warmup)
						     : std::max<uint64_t>(2, iterations / 10);
	if (warmup)
		run(size, warmup, nullptr, false);
	before_measured(size);
	std::vector<double> samples;
	const uint64_t posts_before = posts();
	const uint64_t dropped_before = dropped_samples_;
	const double elapsed = run(size, iterations, &samples, true);
	row.posts = posts() - posts_before;
	row.dropped_samples = dropped_samples_ - dropped_before;
	after_measured(size, salt);

	row.iterations = iterations;
	const double n = static_cast<double>(iterations);
	if (lat()) {
		const double per_op = elapsed / n / trips_per_iteration();
		row.mbps = static_cast<double>(size) / per_op / 1e6;
		row.mops = 1 / per_op / 1e6;
	} else {
		row.mbps = static_cast<double>(size) * n / elapsed / 1e6;
		row.mops = n / elapsed / 1e6;
	}
	if (!samples.empty()) {
		std::sort(samples.begin(), samples.end());
		row.p50 = percentile(samples, 0.50);
		row.p99 = percentile(samples, 0.99);
	}
	return row;
}

void ClientRunner::set_window(size_t tx_queue_size)
{
	window_ = std::max<size_t>(1, std::min<size_t>(options_.window, tx_queue_size));
	if (window_ < options_.window)
		fprintf(stderr, "vrma_bench: window %zu clamped to the transmit queue size %zu\n",
			options_.window, window_);
}

RunInfo ClientRunner::common_run_info(const fi_info *info, Op op, Mode mode) const
{
	RunInfo ri;
	ri.provider = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "?";
	ri.fabric = info->fabric_attr->name ? info->fabric_attr->name : "?";
	ri.domain = info->domain_attr->name ? info->domain_attr->name : "?";
	ri.op = op;
	ri.mode = mode;
	ri.window = window_;
	ri.sample_clock = sample_clock_.source();
	return ri;
}

std::string ClientRunner::too_large(const char *limit_name, size_t limit)
{
	return std::string("larger than ") + limit_name + " (" + std::to_string(limit) + ")";
}

void ClientRunner::add_sample(std::vector<double> &samples, Stamp a, Stamp b, double per)
{
	if (const auto us = sample_clock_.micros(a, b))
		samples.push_back(*us / per);
	else
		++dropped_samples_;
}

uint64_t ClientRunner::calibrate(size_t size)
{
	const double target = options_.duration / 20;
	for (uint64_t n = 2;; n *= 2) {
		const double t = run(size, n, nullptr, false);
		if (t >= target || n >= (uint64_t{1} << 30)) {
			const double per_op = std::max(t, 1e-9) / static_cast<double>(n);
			return std::max<uint64_t>(10, static_cast<uint64_t>(options_.duration / per_op));
		}
	}
}

double ClientRunner::run(size_t size, uint64_t n, std::vector<double> *samples, bool show)
{
	if (show)
		progress_line_.start(size, n);
	const double elapsed = timed_run(size, n, samples, show);
	if (show)
		progress_line_.clear();
	return elapsed;
}

// ---------------------------------------------------------------- roles

namespace {

int run_server(const Options &opt, MakeServer make_server, std::promise<ListenAddress> *ready)
{
	bool announced = false;
	const int status = guarded("server", [&] {
		const std::unique_ptr<BenchServer> server = make_server(opt);
		const ListenAddress addr = server->listen();
		if (ready) {
			ready->set_value(addr);
			announced = true;
		} else {
			fprintf(stderr, "vrma_bench: server listening on %s port %s (%s)\n",
				addr.host.empty() ? "*" : addr.host.c_str(), addr.port.c_str(),
				server->describe().c_str());
		}
		server->accept();
		server->serve();
		return 0;
	});
	if (ready && !announced)
		ready->set_value(ListenAddress{});
	return status;
}

int run_client(const Options &opt, MakeClient make_client, const std::string &host, const std::string &port)
{
	return guarded("client", [&] {
		const std::vector<size_t> sizes = run_sizes(opt);
		const size_t max_size = *std::max_element(sizes.begin(), sizes.end());
		const std::unique_ptr<ClientRunner> client = make_client(opt);
		client->connect(host, port, max_size);
		const RunInfo ri = client->run_info();
		print_header(ri);
		std::vector<Row> rows;
		for (size_t i = 0; i < sizes.size(); ++i) {
			rows.push_back(client->measure(sizes[i], i));
			print_row(rows.back());
		}
		client->quit();
		if (!opt.json_out.empty())
			write_json(opt.json_out, ri, rows);
		return 0;
	});
}

int run_loopback(const Options &opt, MakeServer make_server, MakeClient make_client)
{
	std::promise<ListenAddress> ready;
	std::future<ListenAddress> listening = ready.get_future();
	int server_status = 0;
	std::thread server([&] { server_status = run_server(opt, make_server, &ready); });
	const ListenAddress addr = listening.get();
	const int client_status = addr.ok ? run_client(opt, make_client, addr.host, addr.port) : 0;
	server.join();
	if (!addr.ok)
		return server_status;
	return client_status ? client_status : server_status;
}

} // namespace

int run_roles(const Options &opt, MakeServer make_server, MakeClient make_client)
{
	switch (opt.role) {
	case Role::server:
		return run_server(opt, make_server, nullptr);
	case Role::client:
		return run_client(opt, make_client, opt.server_addr, std::to_string(opt.port));
	case Role::loopback:
		return run_loopback(opt, make_server, make_client);
	}
	return kExitError;
}

} // namespace vrma_bench
