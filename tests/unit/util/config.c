/* Tests of src/config.c: defaults, every kind of bad value, and how problems are reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "util/log.h"

/* Every variable config_load reads. */
static const char *const all_vars[] = {
	"HOST",
	"PORT",
	"SANDBOX_SOCKET",
	"SANDBOX_PORT_FILE",
	"SANDBOX_STATE_DIR",
	"SANDBOX_RUN_DIR",
	"FIRECRACKER_ARTIFACTS_DIR",
	"SANDBOX_AGENT_BIN",
	"SANDBOX_UI_DIR",
	"SANDBOX_DRIVER",
	"SANDBOX_DEFAULT_TEMPLATE",
	"SANDBOX_WARM_POOL",
	"SANDBOX_MAX_SESSIONS",
	"SESSION_IDLE_TIMEOUT",
	"SESSION_MAX_LIFETIME",
	"VM_VCPU_COUNT",
	"VM_MEM_SIZE_MIB",
	"VM_CPU_QUOTA_US",
	"VM_CPU_PERIOD_US",
	"VM_MEMORY_LIMIT_BYTES",
	"VM_NOFILE_LIMIT",
	"VM_DISK_LIMIT_BYTES",
	"SANDBOX_PIDS_MAX",
	"SANDBOX_MAX_MEMORY_BYTES",
	"SANDBOX_MAX_VCPUS",
	"SANDBOX_MEMORY_WATERMARK_BYTES",
	"SANDBOX_MAX_BODY_BYTES",
	"SANDBOX_MAX_OUTPUT_BYTES",
	"SANDBOX_MAX_READ_BYTES",
	"SANDBOX_EXEC_TIMEOUT_MS",
	"SANDBOX_WORKERS",
	"SANDBOX_FIRST_REPLY_TIMEOUT_MS",
	"SANDBOX_FILE_OP_TIMEOUT_MS",
	"SANDBOX_PING_INTERVAL_MS",
	"SANDBOX_PING_TIMEOUT_MS",
	"SANDBOX_SHUTDOWN_GRACE_MS",
	"SANDBOX_REAPER_INTERVAL_MS",
	"SANDBOX_POOL_RETRY_MS",
	"AUTH_ENABLED",
	"SANDBOX_LOG_FORMAT",
	"AUTH_KEY_PREFIX",
	"MCP_AUTH_TOKEN",
	"FIRECRACKER_BIN",
	"FIRECRACKER_JAILER_BIN",
	"FIRECRACKER_JAIL_BASE",
	"FIRECRACKER_UID",
	"FIRECRACKER_GID",
	"SANDBOX_QEMU_BIN",
	"SANDBOX_QEMU_ACCEL",
	"VM_DNS_MODE",
	"VM_DNS_DOMAINS",
	"VM_DNS_UPSTREAM",
	"VM_DEST_MODE",
	"VM_DEST_RULES",
	"VM_BW_ENABLED",
	"VM_BW_RATE_KBIT",
	"VM_BW_BURST_KBIT",
	"LOG_LEVEL",
};

static int clear_env(void **state)
{
	for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++)
		unsetenv(all_vars[i]);
	log_set_level(LOG_INFO);
	return 0;
}

/* Loads with a single variable set; expects failure and returns the message (static). */
static const char *load_bad(const char *name, const char *value)
{
	static struct err e;
	struct config cfg;
	clear_env(NULL);
	setenv(name, value, 1);
	err_clear(&e);
	int r = config_load(&cfg, &e);
	config_free(&cfg);
	unsetenv(name);
	if (r != -EINVAL) {
		fail_msg("%s=`%s`: config_load returned %d, not -EINVAL", name, value, r);
	}
	assert_int_equal(e.errnum, EINVAL);
	return e.msg;
}

/* The agent the daemon would use from this executable's place in a build tree. */
static char *expected_agent_bin(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	char guess[PATH_MAX + 32];
	snprintf(guess, sizeof(guess), "%s/../agent/sandbox-agent", exe);
	char *real = realpath(guess, NULL);
	return real ? real : strdup("/usr/local/libexec/agent-sandbox/sandbox-agent");
}

static void test_defaults(void **state)
{
	struct config cfg;
	struct err e = { 0 };
	assert_int_equal(config_load(&cfg, &e), 0);
	assert_int_equal(e.errnum, 0);

	assert_string_equal(cfg.host, "127.0.0.1");
	assert_int_equal(cfg.port, 3000);
	assert_null(cfg.socket_path);
	assert_null(cfg.port_file);
	assert_string_equal(cfg.state_dir, "/var/lib/agent-sandbox/state");
	assert_string_equal(cfg.run_dir, "/run/agent-sandbox");
	assert_string_equal(cfg.artifacts_dir, "/var/lib/agent-sandbox/artifacts");
	char *agent = expected_agent_bin();
	assert_string_equal(cfg.agent_bin, agent);
	free(agent);
	/* No dashboard is built beside this test: the installed one. */
	assert_string_equal(cfg.ui_dir, "/usr/local/share/agent-sandbox/ui");

	assert_string_equal(cfg.driver, "auto");
	assert_string_equal(cfg.default_template, "node");
	assert_int_equal(cfg.warm_pool, 2);
	assert_int_equal(cfg.max_sessions, 64);
	assert_int_equal(cfg.idle_timeout_s, 1800);
	assert_int_equal(cfg.max_lifetime_s, 86400);
	assert_int_equal(cfg.vcpus, 1);
	assert_int_equal(cfg.mem_mib, 128);
	assert_int_equal(cfg.cpu_quota_us, 50000);
	assert_int_equal(cfg.cpu_period_us, 100000);
	assert_int_equal(cfg.memory_limit, 128 << 20);
	assert_int_equal(cfg.nofile, 1024);
	assert_int_equal(cfg.disk_limit, 512 << 20);
	assert_int_equal(cfg.pids_max, 256);
	assert_true(cfg.max_memory == 4ull << 30);
	assert_int_equal(cfg.max_vcpus, 4);
	assert_int_equal(cfg.memory_watermark, 256 << 20);

	assert_int_equal(cfg.max_body_bytes, 96 << 20);
	assert_int_equal(cfg.max_output_bytes, 16 << 20);
	assert_int_equal(cfg.max_read_bytes, 64 << 20);
	assert_int_equal(cfg.default_timeout_ms, 0);
	assert_int_equal(cfg.workers, 4);
	assert_int_equal(cfg.first_reply_timeout_ms, 30000);
	assert_int_equal(cfg.file_op_timeout_ms, 120000);
	assert_int_equal(cfg.ping_interval_ms, 10000);
	assert_int_equal(cfg.ping_timeout_ms, 30000);
	assert_int_equal(cfg.shutdown_grace_ms, 10000);
	assert_int_equal(cfg.reaper_interval_ms, 1000);
	assert_int_equal(cfg.pool_retry_ms, 5000);
	assert_int_equal(cfg.mcp_sweep_interval_ms, 5000);

	assert_true(cfg.auth_enabled);
	assert_string_equal(cfg.key_prefix, "sk_test_");
	assert_null(cfg.mcp_auth_token);

	assert_string_equal(cfg.fc_bin, "/usr/local/bin/firecracker");
	assert_string_equal(cfg.fc_jailer_bin, "/usr/local/bin/jailer");
	assert_string_equal(cfg.fc_jail_base, "/var/lib/agent-sandbox/jailer");
	assert_int_equal(cfg.fc_uid, 997);
	assert_int_equal(cfg.fc_gid, 982);

	assert_string_equal(cfg.qemu_bin, "qemu-system-x86_64");
	assert_string_equal(cfg.qemu_accel, "auto");

	assert_int_equal(cfg.dns_mode, NET_FILTER_NONE);
	assert_string_equal(cfg.dns_domains, "");
	assert_string_equal(cfg.dns_upstream, "8.8.8.8,1.1.1.1");
	assert_int_equal(cfg.dest_mode, NET_FILTER_NONE);
	assert_string_equal(cfg.dest_rules, "");
	assert_false(cfg.bw_enabled);
	assert_int_equal(cfg.bw_rate_kbit, 10240);
	assert_int_equal(cfg.bw_burst_kbit, 1024);

	assert_int_equal(log_get_level(), LOG_INFO);
	config_free(&cfg);
}

static void test_values_are_read(void **state)
{
	static const char *const env[][2] = {
		{ "HOST", "0.0.0.0" },
		{ "PORT", "0" },
		{ "SANDBOX_SOCKET", "/run/sandboxd.sock" },
		{ "SANDBOX_PORT_FILE", "/tmp/port" },
		{ "SANDBOX_STATE_DIR", "/srv/state" },
		{ "SANDBOX_RUN_DIR", "/srv/run" },
		{ "FIRECRACKER_ARTIFACTS_DIR", "/srv/artifacts" },
		{ "SANDBOX_AGENT_BIN", "/opt/sandbox-agent" },
		{ "SANDBOX_DRIVER", "qemu" },
		{ "SANDBOX_DEFAULT_TEMPLATE", "python-3.12_x" },
		{ "SANDBOX_WARM_POOL", "0" },
		{ "SANDBOX_MAX_SESSIONS", "65536" },
		{ "SESSION_IDLE_TIMEOUT", "60" },
		{ "SESSION_MAX_LIFETIME", "0" },
		{ "VM_VCPU_COUNT", "32" },
		{ "VM_MEM_SIZE_MIB", "2048" },
		{ "VM_CPU_QUOTA_US", "200000" },
		{ "VM_CPU_PERIOD_US", "1000000" },
		{ "VM_MEMORY_LIMIT_BYTES", "8589934592" },
		{ "VM_NOFILE_LIMIT", "4096" },
		{ "VM_DISK_LIMIT_BYTES", "0010485760" },
		{ "SANDBOX_PIDS_MAX", "4194304" },
		{ "SANDBOX_MAX_BODY_BYTES", "4294967296" },
		{ "SANDBOX_MAX_OUTPUT_BYTES", "1024" },
		{ "SANDBOX_MAX_READ_BYTES", "1048576" },
		{ "SANDBOX_EXEC_TIMEOUT_MS", "4294967295" },
		{ "SANDBOX_WORKERS", "1" },
		{ "SANDBOX_FIRST_REPLY_TIMEOUT_MS", "100" },
		{ "SANDBOX_FILE_OP_TIMEOUT_MS", "86400000" },
		{ "SANDBOX_PING_INTERVAL_MS", "0" },
		{ "SANDBOX_PING_TIMEOUT_MS", "250" },
		{ "SANDBOX_SHUTDOWN_GRACE_MS", "0" },
		{ "SANDBOX_REAPER_INTERVAL_MS", "10" },
		{ "SANDBOX_POOL_RETRY_MS", "600000" },
		{ "SANDBOX_MAX_MEMORY_BYTES", "17179869184" },
		{ "SANDBOX_MAX_VCPUS", "32" },
		{ "SANDBOX_MEMORY_WATERMARK_BYTES", "0" },
		{ "AUTH_ENABLED", "no" },
		{ "AUTH_KEY_PREFIX", "sk_live-" },
		{ "MCP_AUTH_TOKEN", "s3cret token" },
		{ "FIRECRACKER_BIN", "/opt/fc/firecracker" },
		{ "FIRECRACKER_JAILER_BIN", "/opt/fc/jailer" },
		{ "FIRECRACKER_JAIL_BASE", "/srv/jail" },
		{ "FIRECRACKER_UID", "0" },
		{ "FIRECRACKER_GID", "4294967294" },
		{ "SANDBOX_QEMU_BIN", "/usr/bin/qemu-system-x86_64" },
		{ "SANDBOX_QEMU_ACCEL", "TCG" },
		{ "VM_DNS_MODE", "allow" },
		{ "VM_DNS_DOMAINS", "*.example.com,example.org" },
		{ "VM_DNS_UPSTREAM", "9.9.9.9" },
		{ "VM_DEST_MODE", "Deny" },
		{ "VM_DEST_RULES", "169.254.169.254/32,10.0.0.0/8:443/tcp" },
		{ "VM_BW_ENABLED", "YES" },
		{ "VM_BW_RATE_KBIT", "100000000" },
		{ "VM_BW_BURST_KBIT", "1" },
		{ "LOG_LEVEL", "debug" },
		{ "SANDBOX_UI_DIR", "/srv/ui" },
	};
	for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++)
		setenv(env[i][0], env[i][1], 1);

	struct config cfg;
	struct err e = { 0 };
	int r = config_load(&cfg, &e);
	if (r != 0)
		fail_msg("config_load: %s", e.msg);

	assert_string_equal(cfg.host, "0.0.0.0");
	assert_int_equal(cfg.port, 0);
	assert_string_equal(cfg.socket_path, "/run/sandboxd.sock");
	assert_string_equal(cfg.port_file, "/tmp/port");
	assert_string_equal(cfg.state_dir, "/srv/state");
	assert_string_equal(cfg.run_dir, "/srv/run");
	assert_string_equal(cfg.artifacts_dir, "/srv/artifacts");
	assert_string_equal(cfg.agent_bin, "/opt/sandbox-agent");
	assert_string_equal(cfg.ui_dir, "/srv/ui");
	assert_string_equal(cfg.driver, "qemu");
	assert_string_equal(cfg.default_template, "python-3.12_x");
	assert_int_equal(cfg.warm_pool, 0);
	assert_int_equal(cfg.max_sessions, 65536);
	assert_int_equal(cfg.idle_timeout_s, 60);
	assert_int_equal(cfg.max_lifetime_s, 0);
	assert_int_equal(cfg.vcpus, 32);
	assert_int_equal(cfg.mem_mib, 2048);
	assert_int_equal(cfg.cpu_quota_us, 200000);
	assert_int_equal(cfg.cpu_period_us, 1000000);
	assert_true(cfg.memory_limit == 8589934592ull);
	assert_int_equal(cfg.nofile, 4096);
	assert_int_equal(cfg.disk_limit, 10485760);
	assert_int_equal(cfg.pids_max, 4194304);
	assert_true(cfg.max_memory == 17179869184ull);
	assert_int_equal(cfg.max_vcpus, 32);
	assert_true(cfg.memory_watermark == 0);
	assert_true(cfg.max_body_bytes == 4294967296ull);
	assert_int_equal(cfg.max_output_bytes, 1024);
	assert_int_equal(cfg.max_read_bytes, 1048576);
	assert_true(cfg.default_timeout_ms == 4294967295u);
	assert_int_equal(cfg.workers, 1);
	assert_int_equal(cfg.first_reply_timeout_ms, 100);
	assert_int_equal(cfg.file_op_timeout_ms, 86400000);
	assert_int_equal(cfg.ping_interval_ms, 0);
	assert_int_equal(cfg.ping_timeout_ms, 250);
	assert_int_equal(cfg.shutdown_grace_ms, 0);
	assert_int_equal(cfg.reaper_interval_ms, 10);
	assert_int_equal(cfg.pool_retry_ms, 600000);
	assert_false(cfg.auth_enabled);
	assert_string_equal(cfg.key_prefix, "sk_live-");
	assert_string_equal(cfg.mcp_auth_token, "s3cret token");
	assert_string_equal(cfg.fc_bin, "/opt/fc/firecracker");
	assert_string_equal(cfg.fc_jailer_bin, "/opt/fc/jailer");
	assert_string_equal(cfg.fc_jail_base, "/srv/jail");
	assert_int_equal(cfg.fc_uid, 0);
	assert_true(cfg.fc_gid == 4294967294u);
	assert_string_equal(cfg.qemu_bin, "/usr/bin/qemu-system-x86_64");
	assert_string_equal(cfg.qemu_accel, "tcg"); /* stored in its canonical spelling */
	assert_int_equal(cfg.dns_mode, NET_FILTER_ALLOW);
	assert_string_equal(cfg.dns_domains, "*.example.com,example.org");
	assert_string_equal(cfg.dns_upstream, "9.9.9.9");
	assert_int_equal(cfg.dest_mode, NET_FILTER_DENY);
	assert_string_equal(cfg.dest_rules, "169.254.169.254/32,10.0.0.0/8:443/tcp");
	assert_true(cfg.bw_enabled);
	assert_int_equal(cfg.bw_rate_kbit, 100000000);
	assert_int_equal(cfg.bw_burst_kbit, 1);
	assert_int_equal(log_get_level(), LOG_DEBUG);
	config_free(&cfg);
}

static void test_booleans(void **state)
{
	static const struct {
		const char *s;
		bool v;
	} cases[] = {
		{ "true", true },   { "1", true },  { "yes", true }, { "True", true },
		{ "false", false }, { "0", false }, { "no", false }, { "FALSE", false },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct config cfg;
		setenv("VM_BW_ENABLED", cases[i].s, 1);
		setenv("AUTH_ENABLED", cases[i].s, 1);
		assert_int_equal(config_load(&cfg, NULL), 0);
		assert_int_equal(cfg.bw_enabled, cases[i].v);
		assert_int_equal(cfg.auth_enabled, cases[i].v);
		config_free(&cfg);
	}
}

static void test_empty_means_default(void **state)
{
	setenv("PORT", "", 1);
	setenv("VM_DNS_MODE", "", 1);
	setenv("AUTH_ENABLED", "", 1);
	setenv("VM_DNS_UPSTREAM", "", 1);
	setenv("LOG_LEVEL", "", 1);
	struct config cfg;
	assert_int_equal(config_load(&cfg, NULL), 0);
	assert_int_equal(cfg.port, 3000);
	assert_int_equal(cfg.dns_mode, NET_FILTER_NONE);
	assert_true(cfg.auth_enabled);
	assert_string_equal(cfg.dns_upstream, "8.8.8.8,1.1.1.1");
	assert_int_equal(log_get_level(), LOG_INFO);
	config_free(&cfg);
}

static void test_relative_paths_become_absolute(void **state)
{
	char cwd[PATH_MAX], want[PATH_MAX + 32];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	snprintf(want, sizeof(want), "%s/state/here", cwd);
	setenv("SANDBOX_STATE_DIR", "state/here", 1);
	struct config cfg;
	assert_int_equal(config_load(&cfg, NULL), 0);
	assert_string_equal(cfg.state_dir, want);
	config_free(&cfg);
}

static void test_bad_numbers(void **state)
{
	static const char *const bad[] = {
		"abc",   "-1",  "+5",   " 5",  "5 ",
		"65536", "1e3", "0x10", "3.0", "99999999999999999999999",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[256];
		snprintf(want, sizeof(want), "PORT: `%s` is not a number between 0 and 65535",
			 bad[i]);
		assert_string_equal(load_bad("PORT", bad[i]), want);
	}
	assert_string_equal(load_bad("VM_VCPU_COUNT", "0"),
			    "VM_VCPU_COUNT: `0` is not a number between 1 and 32");
	assert_string_equal(load_bad("VM_VCPU_COUNT", "33"),
			    "VM_VCPU_COUNT: `33` is not a number between 1 and 32");
	assert_string_equal(
		load_bad("FIRECRACKER_UID", "4294967295"),
		"FIRECRACKER_UID: `4294967295` is not a number between 0 and 4294967294");
	assert_string_equal(load_bad("SANDBOX_EXEC_TIMEOUT_MS", "4294967296"),
			    "SANDBOX_EXEC_TIMEOUT_MS: `4294967296` is not a number between 0 and "
			    "4294967295");
	assert_string_equal(load_bad("VM_CPU_PERIOD_US", "999"),
			    "VM_CPU_PERIOD_US: `999` is not a number between 1000 and 1000000");
	assert_string_equal(load_bad("SANDBOX_REAPER_INTERVAL_MS", "9"),
			    "SANDBOX_REAPER_INTERVAL_MS: `9` is not a number between 10 and 60000");
	assert_string_equal(
		load_bad("SANDBOX_PING_TIMEOUT_MS", "99"),
		"SANDBOX_PING_TIMEOUT_MS: `99` is not a number between 100 and 3600000");
	assert_string_equal(load_bad("SESSION_IDLE_TIMEOUT", "0"),
			    "SESSION_IDLE_TIMEOUT: `0` is not a number between 1 and 31536000");
}

static const char *const size_vars[] = { "VM_MEMORY_LIMIT_BYTES",  "SANDBOX_MAX_MEMORY_BYTES",
					 "VM_DISK_LIMIT_BYTES",    "SANDBOX_MAX_BODY_BYTES",
					 "SANDBOX_MAX_READ_BYTES", "SANDBOX_MAX_DISK_BYTES" };

/* Whatever test_sizes left set, even when it failed half-way. */
static int clear_sizes(void **state)
{
	for (size_t i = 0; i < sizeof(size_vars) / sizeof(size_vars[0]); i++)
		unsetenv(size_vars[i]);
	return clear_env(state);
}

/* Sizes take the CLI's syntax (src/util/size.c): bytes, or K, M, G, T. */
static void test_sizes(void **state)
{
	setenv("VM_MEMORY_LIMIT_BYTES", "512M", 1);
	setenv("SANDBOX_MAX_MEMORY_BYTES", "2GiB", 1);
	setenv("VM_DISK_LIMIT_BYTES", "1g", 1);
	setenv("SANDBOX_MAX_BODY_BYTES", "64MB", 1);
	setenv("SANDBOX_MAX_READ_BYTES", "65536", 1);
	setenv("SANDBOX_MAX_DISK_BYTES", "2T", 1);
	struct config cfg;
	struct err e = { 0 };
	assert_int_equal(config_load(&cfg, &e), 0);
	assert_true(cfg.memory_limit == 512ull << 20);
	assert_true(cfg.max_memory == 2ull << 30);
	assert_true(cfg.disk_limit == 1ull << 30);
	assert_true(cfg.max_body_bytes == 64ull << 20);
	assert_true(cfg.max_read_bytes == 65536);
	assert_true(cfg.max_disk_bytes == 2ull << 40);
	config_free(&cfg);
	clear_sizes(NULL);

	static const char *const garbage[] = { "M",   "512X", "5.5M", "5M ", " 5M", "+5M",
					       "5Mi", "5MBB", "0x10", "1e3", "five" };
	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		char want[256];
		snprintf(want, sizeof(want),
			 "VM_MEMORY_LIMIT_BYTES: `%s` is not a size (bytes, or a whole number with "
			 "K, M, G or T: powers of 1024, e.g. 512M)",
			 garbage[i]);
		assert_string_equal(load_bad("VM_MEMORY_LIMIT_BYTES", garbage[i]), want);
	}
	assert_string_equal(load_bad("VM_MEMORY_LIMIT_BYTES", "-512M"),
			    "VM_MEMORY_LIMIT_BYTES: `-512M` is negative: a size is 0 or more");
	assert_string_equal(load_bad("SANDBOX_MAX_BODY_BYTES", "18446744073709551615"),
			    "SANDBOX_MAX_BODY_BYTES: `18446744073709551615` is too large (at most "
			    "9223372036854775807 bytes)");
	assert_string_equal(load_bad("SANDBOX_MAX_BODY_BYTES", "9999999T"),
			    "SANDBOX_MAX_BODY_BYTES: `9999999T` is too large (at most "
			    "9223372036854775807 bytes)");
	assert_string_equal(load_bad("VM_MEMORY_LIMIT_BYTES", "2T"),
			    "VM_MEMORY_LIMIT_BYTES: `2T` is not between 1048576 and 1099511627776 "
			    "bytes");
	assert_string_equal(
		load_bad("SANDBOX_MAX_BODY_BYTES", "5G"),
		"SANDBOX_MAX_BODY_BYTES: `5G` is not between 1024 and 4294967296 bytes");
}

static void test_bad_words(void **state)
{
	assert_string_equal(load_bad("VM_BW_ENABLED", "maybe"),
			    "VM_BW_ENABLED: `maybe` is not one of true, false, 1, 0, yes, no");
	assert_string_equal(load_bad("AUTH_ENABLED", "on"),
			    "AUTH_ENABLED: `on` is not one of true, false, 1, 0, yes, no");
	assert_string_equal(load_bad("VM_DNS_MODE", "block"),
			    "VM_DNS_MODE: `block` is not one of none, allow, deny");
	assert_string_equal(load_bad("VM_DEST_MODE", "allowlist"),
			    "VM_DEST_MODE: `allowlist` is not one of none, allow, deny");
	assert_string_equal(load_bad("SANDBOX_LOG_FORMAT", "pretty"),
			    "SANDBOX_LOG_FORMAT: `pretty` is not one of auto, json, text");
	assert_string_equal(load_bad("SANDBOX_DRIVER", "docker"),
			    "SANDBOX_DRIVER: `docker` is not one of auto, jail, qemu, firecracker");
	assert_string_equal(load_bad("SANDBOX_QEMU_ACCEL", "hvf"),
			    "SANDBOX_QEMU_ACCEL: `hvf` is not one of auto, kvm, tcg");
	assert_string_equal(load_bad("LOG_LEVEL", "verbose"),
			    "LOG_LEVEL: `verbose` is not one of trace, debug, info, warn, error, "
			    "fatal, silent");
	assert_string_equal(load_bad("SANDBOX_SOCKET", "relative.sock"),
			    "SANDBOX_SOCKET: `relative.sock` is not an absolute path shorter than "
			    "108 bytes");
	assert_non_null(strstr(load_bad("SANDBOX_DEFAULT_TEMPLATE", "../etc"),
			       "SANDBOX_DEFAULT_TEMPLATE: `../etc` is not a template name"));
	assert_non_null(strstr(load_bad("SANDBOX_DEFAULT_TEMPLATE", "a/b"), "not a template name"));
	assert_non_null(strstr(load_bad("AUTH_KEY_PREFIX", "sk test"),
			       "AUTH_KEY_PREFIX: `sk test` is not a key prefix"));
}

static void test_long_socket_path(void **state)
{
	char path[200] = "/";
	memset(path + 1, 's', 120);
	path[121] = '\0';
	const char *msg = load_bad("SANDBOX_SOCKET", path);
	assert_non_null(strstr(msg, "is not an absolute path shorter than 108 bytes"));
}

static void test_bad_value_is_shown_safely(void **state)
{
	char value[300];
	memset(value, '7', sizeof(value) - 1);
	value[sizeof(value) - 1] = '\0';
	value[0] = '\n';
	value[1] = '`';
	const char *msg = load_bad("PORT", value);
	assert_null(strchr(msg, '\n')); /* one line per problem, whatever the value holds */
	assert_non_null(strstr(msg, "PORT: `??77"));
	assert_non_null(strstr(msg, "777...` is not a number"));
	assert_true(strlen(msg) < 160);
}

static void test_all_problems_reported(void **state)
{
	setenv("PORT", "abc", 1);
	setenv("VM_DNS_MODE", "sometimes", 1);
	setenv("VM_BW_ENABLED", "maybe", 1);
	setenv("LOG_LEVEL", "loud", 1);
	setenv("VM_VCPU_COUNT", "2", 1); /* a good value among bad ones is still read */

	struct config cfg;
	struct err e = { 0 };
	assert_int_equal(config_load(&cfg, &e), -EINVAL);
	assert_int_equal(e.errnum, EINVAL);
	assert_string_equal(e.msg,
			    "PORT: `abc` is not a number between 0 and 65535\n"
			    "VM_DNS_MODE: `sometimes` is not one of none, allow, deny\n"
			    "VM_BW_ENABLED: `maybe` is not one of true, false, 1, 0, yes, no\n"
			    "LOG_LEVEL: `loud` is not one of trace, debug, info, warn, error, "
			    "fatal, silent");
	/* cfg stays usable and freeable: bad values leave the defaults in place */
	assert_int_equal(cfg.port, 3000);
	assert_int_equal(cfg.vcpus, 2);
	assert_string_equal(cfg.host, "127.0.0.1");
	config_free(&cfg);
}

static void test_many_problems_are_cut_at_a_line(void **state)
{
	static const char *const numeric[] = {
		"PORT",
		"SANDBOX_WARM_POOL",
		"SANDBOX_MAX_SESSIONS",
		"SESSION_IDLE_TIMEOUT",
		"SESSION_MAX_LIFETIME",
		"VM_VCPU_COUNT",
		"VM_MEM_SIZE_MIB",
		"VM_CPU_QUOTA_US",
		"VM_CPU_PERIOD_US",
		"VM_MEMORY_LIMIT_BYTES",
		"VM_NOFILE_LIMIT",
		"VM_DISK_LIMIT_BYTES",
		"SANDBOX_PIDS_MAX",
		"SANDBOX_WORKERS",
	};
	size_t n = sizeof(numeric) / sizeof(numeric[0]);
	for (size_t i = 0; i < n; i++)
		setenv(numeric[i], "x", 1);

	struct config cfg;
	struct err e = { 0 };
	assert_int_equal(config_load(&cfg, &e), -EINVAL);
	config_free(&cfg);

	size_t len = strlen(e.msg);
	assert_true(len < ERR_MSG_MAX);
	assert_true(strncmp(e.msg, "PORT: `x` is not a number", 25) == 0);
	const char *tail = strrchr(e.msg, '\n');
	assert_non_null(tail);
	unsigned lines = 0, more = 0;
	for (const char *c = e.msg; c < tail; c++)
		lines += *c == '\n';
	lines++; /* the last full line before the tail */
	assert_int_equal(sscanf(tail, "\n(and %u more)", &more), 1);
	assert_int_equal(lines + more, n);
	assert_true(more > 0);
}

static void test_log_level_is_applied(void **state)
{
	struct config cfg;
	setenv("LOG_LEVEL", "silent", 1);
	assert_int_equal(config_load(&cfg, NULL), 0);
	assert_false(log_enabled(LOG_FATAL));
	config_free(&cfg);

	setenv("LOG_LEVEL", "warn", 1);
	assert_int_equal(config_load(&cfg, NULL), 0);
	assert_int_equal(log_get_level(), LOG_WARN);
	config_free(&cfg);
}

static void test_free_is_safe(void **state)
{
	struct config cfg;
	memset(&cfg, 0, sizeof(cfg));
	config_free(&cfg);
	config_free(NULL);

	cfg.host = strdup("partial");
	cfg.dns_domains = strdup("x");
	config_free(&cfg);
	assert_null(cfg.host);
	assert_null(cfg.dns_domains);

	assert_int_equal(config_load(&cfg, NULL), 0);
	config_free(&cfg);
	config_free(&cfg); /* twice: fields were reset */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_defaults, clear_env),
		cmocka_unit_test_setup(test_values_are_read, clear_env),
		cmocka_unit_test_setup(test_booleans, clear_env),
		cmocka_unit_test_setup(test_empty_means_default, clear_env),
		cmocka_unit_test_setup(test_relative_paths_become_absolute, clear_env),
		cmocka_unit_test_setup(test_bad_numbers, clear_env),
		cmocka_unit_test_setup_teardown(test_sizes, clear_sizes, clear_sizes),
		cmocka_unit_test_setup(test_bad_words, clear_env),
		cmocka_unit_test_setup(test_long_socket_path, clear_env),
		cmocka_unit_test_setup(test_bad_value_is_shown_safely, clear_env),
		cmocka_unit_test_setup(test_all_problems_reported, clear_env),
		cmocka_unit_test_setup(test_many_problems_are_cut_at_a_line, clear_env),
		cmocka_unit_test_setup(test_log_level_is_applied, clear_env),
		cmocka_unit_test_setup(test_free_is_safe, clear_env),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
