/* Tests of agent/init.c: reading the agent's settings from a kernel command line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "init.h"

static void test_defaults(void **state)
{
	struct init_config cfg;
	init_parse_cmdline("console=ttyS0 init=/sbin/sandbox-agent quiet\n", &cfg);
	assert_string_equal(cfg.channel, "serial:agent");
	assert_int_equal(cfg.workspace_mib, 512);
	assert_string_equal(cfg.hostname, "sandbox");
	init_parse_cmdline("", &cfg);
	assert_string_equal(cfg.channel, "serial:agent");
}

static void test_values(void **state)
{
	struct init_config cfg;
	init_parse_cmdline("ro sandbox.channel=vsock:5000 sandbox.workspace_mib=2048 "
			   "sandbox.hostname=box-1\n",
			   &cfg);
	assert_string_equal(cfg.channel, "vsock:5000");
	assert_int_equal(cfg.workspace_mib, 2048);
	assert_string_equal(cfg.hostname, "box-1");
	init_parse_cmdline("sandbox.channel=serial:ctl", &cfg);
	assert_string_equal(cfg.channel, "serial:ctl");
}

static void test_malformed(void **state)
{
	struct init_config cfg;
	init_parse_cmdline("sandbox.channel=tcp:1 sandbox.workspace_mib=12x "
			   "sandbox.workspace_mib=0 sandbox.hostname= sandbox.channel",
			   &cfg);
	assert_string_equal(cfg.channel, "serial:agent");
	assert_int_equal(cfg.workspace_mib, 512);
	assert_string_equal(cfg.hostname, "sandbox");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
