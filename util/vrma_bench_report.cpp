// vrma_bench: the results table, --json output and --plot (gnuplot) of
// JSON result files.

#include "vrma_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace vrma_bench {
namespace {

// v in printf format `fmt` (one double), or `none`.
std::string format_opt(const std::optional<double> &v, const char *fmt, const char *none)
{
	if (!v)
		return none;
	char buf[32];
	snprintf(buf, sizeof buf, fmt, *v);
	return buf;
}

std::string fmt_opt(const std::optional<double> &v)
{
	return format_opt(v, "%.2f", "-");
}

// Two-sided runs (send, tagged): endpoint type, inject size and data
// progress instead of the RMA flags.
void print_two_sided_header(const RunInfo &ri)
{
	printf("# vrma_bench: provider %s, fabric %s, domain %s, endpoint %s, op %s, mode %s",
	       ri.provider.c_str(), ri.fabric.c_str(), ri.domain.c_str(), ri.endpoint.c_str(),
	       op_name(ri.op), mode_name(ri.mode));
	if (ri.mode != Mode::lat)
		printf(", window %zu", ri.window);
	printf(", inject_size %zu, data progress %s\n", ri.inject_size, ri.data_progress.c_str());
	if (ri.mode == Mode::lat)
		printf("# MB = 10^6 bytes; lat: one-way latency = round trip / 2, per iteration\n");
	else
		printf("# MB = 10^6 bytes, Mops/s = 10^6 messages/s, timed up to the receiver's ack; lat: time per message within a window (window time / %zu)\n",
		       ri.window);
	printf("# %8s  %10s  %10s  %10s  %10s\n", "size", "MB/s", "Mops/s", "lat_p50_us", "lat_p99_us");
	fflush(stdout);
}

// What an RMA or atomic run's lat figures are.
const char *lat_meaning(Op op)
{
	switch (op) {
	case Op::read: return "one read's completion time";
	case Op::fadd: return "one fadd's completion time (fi_fetch_atomic FI_SUM; a round trip, as read's)";
	case Op::cswap: return "one cswap's completion time (fi_compare_atomic FI_CSWAP; a round trip, as read's)";
	case Op::amax: return "one amax's completion time (fi_fetch_atomic FI_MAX; a round trip, as read's)";
	case Op::write:
	case Op::writedata:
	case Op::inject_write:
	case Op::send:
	case Op::tagged: break;
	}
	return "one-way latency = round trip / 2, per iteration";
}

} // namespace

void print_header(const RunInfo &ri)
{
	if (is_two_sided(ri.op)) {
		print_two_sided_header(ri);
		return;
	}
	// RMA: the endpoint is named for FI_EP_RDM only (FI_EP_MSG's header
	// stays as it always was).
	printf("# vrma_bench: provider %s, fabric %s, domain %s%s%s, op %s, mode %s, flags %s",
	       ri.provider.c_str(), ri.fabric.c_str(), ri.domain.c_str(),
	       ri.endpoint.empty() ? "" : ", endpoint ", ri.endpoint.c_str(), op_name(ri.op),
	       mode_name(ri.mode), flags_name(ri.flags).c_str());
	if (ri.mode != Mode::lat)
		printf(", window %zu", ri.window);
	if (!ri.inject_flush.empty())
		printf(", inject flush: %s", ri.inject_flush.c_str());
	printf("\n");
	if (ri.mode == Mode::lat)
		printf("# MB = 10^6 bytes; lat: %s\n", lat_meaning(ri.op));
	else
		printf("# MB = 10^6 bytes; lat: time per operation within a window (window time / %zu)\n",
		       ri.window);
	printf("# %8s  %10s  %10s  %10s  %10s\n", "size", "MB/s", "Mops/s", "lat_p50_us", "lat_p99_us");
	fflush(stdout);
}

void print_row(const Row &row)
{
	if (row.skipped)
		printf("# %8zu  skipped: %s\n", row.size, row.note.c_str());
	else
		printf("%10zu  %10.2f  %10.4f  %10s  %10s\n", row.size, row.mbps, row.mops,
		       fmt_opt(row.p50).c_str(), fmt_opt(row.p99).c_str());
	fflush(stdout);
}

namespace {

std::string json_string(const std::string &s)
{
	std::string out = "\"";
	for (char c : s) {
		if (c == '"' || c == '\\') {
			out += '\\';
			out += c;
		} else if (static_cast<unsigned char>(c) < 0x20) {
			char buf[8];
			snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
			out += buf;
		} else {
			out += c;
		}
	}
	return out + "\"";
}

std::string json_number(const std::optional<double> &v)
{
	return format_opt(v, "%.9g", "null");
}

} // namespace

void write_json(const std::string &path, const RunInfo &ri, const std::vector<Row> &rows)
{
	FILE *f = fopen(path.c_str(), "w");
	if (!f)
		fail(kExitError, "cannot write %s: %s", path.c_str(), strerror(errno));
	fprintf(f, "{\n  \"provider\": %s,\n  \"fabric\": %s,\n  \"domain\": %s,\n",
		json_string(ri.provider).c_str(), json_string(ri.fabric).c_str(),
		json_string(ri.domain).c_str());
	fprintf(f, "  \"op\": %s,\n  \"mode\": %s,\n  \"flags\": %s,\n  \"window\": %zu,\n",
		json_string(op_name(ri.op)).c_str(), json_string(mode_name(ri.mode)).c_str(),
		json_string(ri.flags ? flags_name(ri.flags) : "").c_str(), ri.window);
	fprintf(f, "  \"sample_clock\": %s,\n", json_string(ri.sample_clock).c_str());
	if (!ri.endpoint.empty())
		fprintf(f, "  \"endpoint\": %s,\n", json_string(ri.endpoint).c_str());
	if (is_two_sided(ri.op))
		fprintf(f, "  \"data_progress\": %s,\n  \"inject_size\": %zu,\n",
			json_string(ri.data_progress).c_str(), ri.inject_size);
	fprintf(f, "  \"results\": [");
	bool first = true;
	for (const Row &row : rows) {
		if (row.skipped)
			continue;
		fprintf(f, "%s\n    {\"size\": %zu, \"mbps\": %s, \"mops\": %s, \"p50_us\": %s, \"p99_us\": %s, \"iterations\": %" PRIu64 ", \"posts\": %" PRIu64 ", \"dropped_samples\": %" PRIu64 "}",
			first ? "" : ",", row.size, json_number(row.mbps).c_str(),
			json_number(row.mops).c_str(), json_number(row.p50).c_str(),
			json_number(row.p99).c_str(), row.iterations, row.posts, row.dropped_samples);
		first = false;
	}
	fprintf(f, "\n  ]\n}\n");
	if (fclose(f) != 0)
		fail(kExitError, "cannot write %s: %s", path.c_str(), strerror(errno));
}

namespace {

struct JsonValue {
	enum class Type { null, boolean, number, string, array, object } type = Type::null;
	bool boolean = false;
	double number = 0;
	std::string string;
	std::vector<JsonValue> items;   // array elements or object values
	std::vector<std::string> keys; // object keys, parallel to items

	const JsonValue *get(const char *key) const
	{
		for (size_t i = 0; i < keys.size(); ++i)
			if (keys[i] == key)
				return &items[i];
		return nullptr;
	}
};

// Enough JSON for the files --json writes (and any other well-formed JSON).
class JsonParser {
public:
	explicit JsonParser(const std::string &text) : s_(text) {}
	bool parse(JsonValue &out, std::string &error)
	{
		if (!value(out, 0) || (skip_ws(), pos_ != s_.size())) {
			error = "invalid JSON near byte " + std::to_string(pos_);
			return false;
		}
		return true;
	}

private:
	const std::string &s_;
	size_t pos_ = 0;

	void skip_ws()
	{
		while (pos_ < s_.size() && strchr(" \t\r\n", s_[pos_]))
			++pos_;
	}
	// The items of the object or array whose opening bracket is at pos_,
	// separated by ',' up to `close`: item() reads one (false: malformed).
	template <class Item> bool items(char close, Item item)
	{
		++pos_;
		skip_ws();
		if (pos_ < s_.size() && s_[pos_] == close) {
			++pos_;
			return true;
		}
		for (;;) {
			if (!item())
				return false;
			skip_ws();
			if (pos_ >= s_.size() || (s_[pos_] != ',' && s_[pos_] != close))
				return false;
			if (s_[pos_++] == close)
				return true;
		}
	}
	bool literal(const char *word)
	{
		const size_t len = strlen(word);
		if (s_.compare(pos_, len, word) != 0)
			return false;
		pos_ += len;
		return true;
	}
	bool string(std::string &out)
	{
		if (pos_ >= s_.size() || s_[pos_] != '"')
			return false;
		++pos_;
		while (pos_ < s_.size() && s_[pos_] != '"') {
			char c = s_[pos_++];
			if (c != '\\') {
				out += c;
				continue;
			}
			if (pos_ >= s_.size())
				return false;
			c = s_[pos_++];
			switch (c) {
			case 'n': out += '\n'; break;
			case 't': out += '\t'; break;
			case 'r': out += '\r'; break;
			case 'b': out += '\b'; break;
			case 'f': out += '\f'; break;
			case 'u': {
				if (pos_ + 4 > s_.size())
					return false;
				const unsigned long code = strtoul(s_.substr(pos_, 4).c_str(), nullptr, 16);
				pos_ += 4;
				out += code < 0x80 ? static_cast<char>(code) : '?';
				break;
			}
			default: out += c; break;
			}
		}
		if (pos_ >= s_.size())
			return false;
		++pos_;
		return true;
	}
	bool value(JsonValue &out, int depth)
	{
		if (depth > 64)
			return false;
		skip_ws();
		if (pos_ >= s_.size())
			return false;
		const char c = s_[pos_];
		if (c == '{') {
			out.type = JsonValue::Type::object;
			return items('}', [&] {
				skip_ws();
				std::string key;
				if (!string(key))
					return false;
				skip_ws();
				if (pos_ >= s_.size() || s_[pos_] != ':')
					return false;
				++pos_;
				JsonValue item;
				if (!value(item, depth + 1))
					return false;
				out.keys.push_back(std::move(key));
				out.items.push_back(std::move(item));
				return true;
			});
		}
		if (c == '[') {
			out.type = JsonValue::Type::array;
			return items(']', [&] {
				JsonValue item;
				if (!value(item, depth + 1))
					return false;
				out.items.push_back(std::move(item));
				return true;
			});
		}
		if (c == '"') {
			out.type = JsonValue::Type::string;
			return string(out.string);
		}
		if (literal("null")) {
			out.type = JsonValue::Type::null;
			return true;
		}
		if (literal("true") || literal("false")) {
			out.type = JsonValue::Type::boolean;
			out.boolean = s_[pos_ - 1] == 'e' && s_[pos_ - 2] == 'u';
			return true;
		}
		char *end = nullptr;
		out.number = strtod(s_.c_str() + pos_, &end);
		if (end == s_.c_str() + pos_)
			return false;
		out.type = JsonValue::Type::number;
		pos_ = static_cast<size_t>(end - s_.c_str());
		return true;
	}
};

struct Series {
	std::string label;
	std::vector<std::array<std::optional<double>, 3>> points; // size, MB/s, p50
};

std::optional<double> json_opt_number(const JsonValue *v)
{
	if (v && v->type == JsonValue::Type::number)
		return v->number;
	return std::nullopt;
}

std::string json_opt_string(const JsonValue &root, const char *key)
{
	const JsonValue *v = root.get(key);
	return v && v->type == JsonValue::Type::string ? v->string : "";
}

Series read_series(const std::string &path)
{
	FILE *f = fopen(path.c_str(), "r");
	if (!f)
		fail(kExitError, "cannot read %s: %s", path.c_str(), strerror(errno));
	std::string text;
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		text.append(buf, n);
	fclose(f);
	JsonValue root;
	std::string error;
	if (!JsonParser(text).parse(root, error))
		fail(kExitError, "%s: %s", path.c_str(), error.c_str());
	const JsonValue *results = root.get("results");
	if (root.type != JsonValue::Type::object || !results || results->type != JsonValue::Type::array)
		fail(kExitError, "%s: not a vrma_bench result (no \"results\" array)", path.c_str());
	Series series;
	// The endpoint type, when the file names one (two-sided runs, RMA over
	// FI_EP_RDM), tells apart series that are otherwise alike.
	const std::string endpoint = json_opt_string(root, "endpoint");
	series.label = json_opt_string(root, "provider") + (endpoint.empty() ? "" : " " + endpoint) + " " +
		       json_opt_string(root, "op") + "/" + json_opt_string(root, "mode");
	const std::string flags = json_opt_string(root, "flags");
	if (!flags.empty())
		series.label += " " + flags;
	for (const JsonValue &r : results->items) {
		const auto size = json_opt_number(r.get("size"));
		if (!size || *size <= 0)
			continue;
		series.points.push_back({size, json_opt_number(r.get("mbps")), json_opt_number(r.get("p50_us"))});
	}
	return series;
}

std::string find_in_path(const char *program)
{
	const char *path = getenv("PATH");
	std::string dirs = path ? path : "/usr/bin:/bin";
	size_t start = 0;
	while (start <= dirs.size()) {
		size_t end = dirs.find(':', start);
		if (end == std::string::npos)
			end = dirs.size();
		std::string candidate = dirs.substr(start, end - start);
		candidate = (candidate.empty() ? "." : candidate) + "/" + program;
		if (access(candidate.c_str(), X_OK) == 0)
			return candidate;
		start = end + 1;
	}
	return "";
}

std::string gnuplot_quote(const std::string &s)
{
	std::string out = "'";
	for (char c : s)
		out += c == '\'' ? std::string("''") : std::string(1, c);
	return out + "'";
}

std::string shell_quote(const std::string &s)
{
	std::string out = "'";
	for (char c : s)
		out += c == '\'' ? std::string("'\\''") : std::string(1, c);
	return out + "'";
}

} // namespace

int plot(const Options &opt)
{
	try {
		const std::string gnuplot = find_in_path("gnuplot");
		if (gnuplot.empty())
			fail(kExitUnsupported, "--plot needs gnuplot, which is not in PATH (Debian: apt-get install -y gnuplot-nox)");
		std::vector<Series> all;
		for (const std::string &path : opt.json_in)
			all.push_back(read_series(path));

		const char *tmp = getenv("TMPDIR");
		std::string dir_template = std::string(tmp && *tmp ? tmp : "/tmp") + "/vrma_bench_plot.XXXXXX";
		std::vector<char> dir_buf(dir_template.begin(), dir_template.end());
		dir_buf.push_back('\0');
		if (!mkdtemp(dir_buf.data()))
			fail(kExitError, "mkdtemp(%s): %s", dir_template.c_str(), strerror(errno));
		const std::string dir = dir_buf.data();
		std::vector<std::string> files;
		auto cleanup = [&] {
			for (const std::string &file : files)
				unlink(file.c_str());
			rmdir(dir.c_str());
		};

		std::string bw_plots, lat_plots;
		for (size_t i = 0; i < all.size(); ++i) {
			const std::string data = dir + "/series" + std::to_string(i) + ".dat";
			files.push_back(data);
			FILE *f = fopen(data.c_str(), "w");
			if (!f) {
				cleanup();
				fail(kExitError, "cannot write %s: %s", data.c_str(), strerror(errno));
			}
			bool has_bw = false, has_lat = false;
			for (const auto &p : all[i].points) {
				fprintf(f, "%.0f %s %s\n", *p[0], p[1] ? json_number(p[1]).c_str() : "?",
					p[2] && *p[2] > 0 ? json_number(p[2]).c_str() : "?");
				has_bw |= p[1].has_value();
				has_lat |= p[2].has_value() && *p[2] > 0;
			}
			fclose(f);
			const std::string title = gnuplot_quote(all[i].label);
			if (has_bw)
				bw_plots += (bw_plots.empty() ? "" : ", ") + gnuplot_quote(data) +
					    " using 1:2 with linespoints title " + title;
			if (has_lat)
				lat_plots += (lat_plots.empty() ? "" : ", ") + gnuplot_quote(data) +
					     " using 1:3 with linespoints title " + title;
		}
		if (bw_plots.empty() && lat_plots.empty()) {
			cleanup();
			fail(kExitError, "no bandwidth or latency values in the result files");
		}
		// One panel per kind of value present, side by side when both are.
		const bool both = !bw_plots.empty() && !lat_plots.empty();
		std::string gp = "set terminal pngcairo noenhanced size " +
				 std::string(both ? "1400,520" : "760,520") + "\n" +
				 "set output " + gnuplot_quote(opt.plot_out) + "\n" +
				 "set datafile missing '?'\n";
		if (both)
			gp += "set multiplot layout 1,2 title 'vrma_bench'\n";
		gp += "set logscale x 2\n"
		      "set format x '%.0b%BB'\n"
		      "set xlabel 'size (bytes)'\n"
		      "set grid\n"
		      "set key top left\n";
		if (!bw_plots.empty())
			gp += "set title 'bandwidth'\nset ylabel 'MB/s'\nplot " + bw_plots + "\n";
		if (!lat_plots.empty())
			gp += "set title 'latency (p50)'\nset logscale y 10\nset ylabel 'us'\nplot " +
			      lat_plots + "\n";
		if (both)
			gp += "unset multiplot\n";

		const std::string script = dir + "/plot.gp";
		files.push_back(script);
		FILE *f = fopen(script.c_str(), "w");
		if (!f) {
			cleanup();
			fail(kExitError, "cannot write %s: %s", script.c_str(), strerror(errno));
		}
		fputs(gp.c_str(), f);
		fclose(f);
		const std::string command = shell_quote(gnuplot) + " " + shell_quote(script);
		const int status = system(command.c_str());
		cleanup();
		if (status == -1)
			fail(kExitError, "cannot run gnuplot: %s", strerror(errno));
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail(kExitError, "gnuplot failed (status %d) drawing %s", status, opt.plot_out.c_str());
		fprintf(stderr, "vrma_bench: wrote %s\n", opt.plot_out.c_str());
		return 0;
	} catch (const BenchError &e) {
		return e.status;
	}
}

} // namespace vrma_bench
