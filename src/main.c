/* sandboxd: the agent-sandbox daemon. Reads its configuration from the environment, picks a
 * driver, serves the HTTP API on one event loop and cleans up everything on the way out. */
#include <errno.h>
#include <malloc.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/host.h"
#include "api/auth.h"
#include "auth/keys.h"
#include "cluster/cluster.h"
#include "api/forward.h"
#include "config.h"
#include "driver/driver.h"
#include "guest/client.h"
#include "http/http.h"
#include "loop.h"
#include "metrics/metrics.h"
#include "metrics/process.h"
#include "net/net.h"
#include "notify.h"
#include "session/session.h"
#include "session/snapshot.h"
#include "session/volume.h"
#include "template/template.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/spawn.h"
#include "util/time.h"

/* How often a stopping daemon looks whether its in-flight requests have finished. */
#define GRACE_TICK_MS 100

static struct {
	struct event_base *base;
	struct config cfg;
	struct http_server *http;
	struct event *sigterm, *sigint, *sighup, *grace_timer;
	bool stopping;
	int exit_code;
} daemon_mod;

static void on_sessions_gone(void *arg)
{
	log_info("sandboxd", "all sandboxes removed; exiting");
	event_base_loopexit(daemon_mod.base, NULL);
}

static void finish_shutdown(void)
{
	if (daemon_mod.grace_timer)
		event_del(daemon_mod.grace_timer);
	session_shutdown(on_sessions_gone, NULL);
}

static void on_grace_tick(evutil_socket_t fd, short what, void *arg)
{
	static unsigned waited_ms;
	/* Streaming requests end when their sessions go; others get the grace period. */
	waited_ms += GRACE_TICK_MS;
	if (http_server_inflight(daemon_mod.http) == 0 ||
	    waited_ms >= daemon_mod.cfg.shutdown_grace_ms)
		finish_shutdown();
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
	if (daemon_mod.stopping) {
		log_warn("sandboxd", "second signal: exiting now");
		event_base_loopbreak(daemon_mod.base);
		daemon_mod.exit_code = 1;
		return;
	}
	daemon_mod.stopping = true;
	notify_stopping();
	log_info("sandboxd",
		 "received %s: no new connections, sessions or commands; finishing in-flight "
		 "requests",
		 strsignal((int)sig));
	http_server_stop_accepting(daemon_mod.http);
	session_grace_begin();
	daemon_mod.grace_timer = event_new(daemon_mod.base, -1, EV_PERSIST, on_grace_tick, NULL);
	struct timeval tv = { .tv_usec = GRACE_TICK_MS * 1000 };
	event_add(daemon_mod.grace_timer, &tv);
}

static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
	struct err e;
	if (session_reload_templates(&e) < 0)
		log_error("sandboxd", "reloading templates failed: %s", e.msg);
}

static void on_http_done(const char *method, const char *route, int status, double seconds,
			 void *arg)
{
	char code[8];
	snprintf(code, sizeof(code), "%d", status);
	metrics_add(metrics_daemon.http_requests_total, 1, route, method, code);
	metrics_observe(metrics_daemon.http_request_duration, seconds, route, method);
}

/* The children started by the spawner and by the daemon, into /metrics at each scrape. */
static void on_scrape_spawns(void *arg)
{
	(void)arg;
	static uint64_t last_via, last_direct;
	uint64_t via, direct;
	spawner_counts(&via, &direct);
	metrics_add(metrics_daemon.spawns, (double)(via - last_via), "spawner");
	metrics_add(metrics_daemon.spawns, (double)(direct - last_direct), "daemon");
	last_via = via;
	last_direct = direct;
}

/* The connection layer's counts, into /metrics at each scrape. */
static void on_scrape_http(void *arg)
{
	static struct http_stats last;
	struct http_stats st;
	if (!daemon_mod.http)
		return;
	http_server_stats(daemon_mod.http, &st);
	metrics_set(metrics_daemon.http_connections, (double)st.connections);
	metrics_add(metrics_daemon.http_connections_closed, (double)(st.refused - last.refused),
		    "refused");
	metrics_add(metrics_daemon.http_connections_closed, (double)(st.evicted - last.evicted),
		    "evicted");
	metrics_add(metrics_daemon.http_connections_closed,
		    (double)(st.header_timeouts - last.header_timeouts), "timeout");
	metrics_add(metrics_daemon.http_connections_closed,
		    (double)(st.send_stalls - last.send_stalls), "stalled");
	metrics_add(metrics_daemon.http_bodies_offloaded, (double)(st.offloaded - last.offloaded));
	metrics_set(metrics_daemon.http_body_bytes, (double)st.body_mem, "memory");
	metrics_set(metrics_daemon.http_body_bytes, (double)st.body_spool, "spool");
	last = st;
}

static void on_guest_violation(const char *kind)
{
	metrics_add(metrics_daemon.guest_protocol_errors_total, 1, kind);
	metrics_add(metrics_daemon.vsock_errors_total, 1, "protocol");
}

static void publish_config(const struct config *c)
{
	metrics_set(metrics_daemon.vm_resource_config, (double)c->vcpus, "vcpu_count");
	metrics_set(metrics_daemon.vm_resource_config, (double)c->mem_mib, "mem_size_mib");
	metrics_set(metrics_daemon.vm_resource_config, (double)c->cpu_quota_us, "cpu_quota_us");
	metrics_set(metrics_daemon.vm_resource_config, (double)c->cpu_period_us, "cpu_period_us");
	metrics_set(metrics_daemon.vm_resource_config, (double)c->memory_limit,
		    "memory_limit_bytes");
	metrics_set(metrics_daemon.vm_resource_config, (double)c->nofile, "nofile_limit");
	metrics_set(metrics_daemon.vm_resource_config, (double)c->disk_limit, "disk_limit_bytes");
	metrics_set(metrics_daemon.vm_resource_config, (double)c->pids_max, "pids_max");
}

static int write_port_file(const char *path, int port, struct err *err)
{
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", path);
	FILE *f = fopen(tmp, "we");
	if (!f)
		return err_sys(err, errno, "cannot write `%s`", tmp);
	fprintf(f, "%d\n", port);
	if (fclose(f) != 0 || rename(tmp, path) < 0)
		return err_sys(err, errno, "cannot write `%s`", path);
	return 0;
}

/* The --help text; also the source of the sandboxd(8) manual page (help2man at build time),
 * so that the two cannot drift. */
static void usage(FILE *out)
{
	fprintf(out,
		"Usage: sandboxd [--help | --version | --defaults | --init-admin-key]\n"
		"The agent-sandbox daemon: gives every AI-agent session its own disposable Linux\n"
		"sandbox (firecracker, qemu or jail driver), served over HTTP (REST, MCP, "
		"metrics).\n"
		"It runs as root in the foreground and logs on stderr (text lines on a terminal,\n"
		"JSON lines otherwise: SANDBOX_LOG_FORMAT). It stops cleanly on SIGTERM or\n"
		"SIGINT (a second signal exits at once); SIGHUP reloads the templates.\n"
		"Under systemd (Type=notify) it reports readiness, stopping and watchdog\n"
		"keep-alives.\n"
		"\n"
		"Options:\n"
		"  --help       print this text and exit\n"
		"  --version    print the version and exit\n"
		"  --defaults   print every setting as NAME=default (empty: unset) and exit\n"
		"  --init-admin-key\n"
		"               when the key store (SANDBOX_STATE_DIR) holds no key, create an\n"
		"               admin key and write it only to SANDBOX_STATE_DIR/admin-key (mode\n"
		"               0600), printing its path, never the key; then exit. The package\n"
		"               runs it at installation, so that no key ever reaches a log\n"
		"\n"
		"Environment:\n"
		"All configuration comes from environment variables (docs/configuration.md in the\n"
		"source, /usr/share/doc/agent-sandbox in the package). The service reads them "
		"from\n"
		"/etc/agent-sandbox/sandboxd.env. Each with its default:\n");
	config_print_names(out, "  ");
	fprintf(out, "\n"
		     "Files:\n"
		     "  /var/lib/agent-sandbox/state/sandboxd.db  API keys (SQLite)\n"
		     "  /var/lib/agent-sandbox/state/admin-key    the first start's admin key, "
		     "mode 0600\n"
		     "  /var/lib/agent-sandbox/artifacts          templates and the guest kernel\n"
		     "  /run/agent-sandbox/sandboxd.sock          the local socket of the service\n"
		     "\n"
		     "See also: sandbox(1).\n");
}

/* --init-admin-key: the admin key of an installation, into its file only. */
static int init_admin_key(void)
{
	struct config cfg;
	struct err e = { 0 };
	int rc = 1;
	if (config_load(&cfg, &e) < 0) {
		fprintf(stderr, "sandboxd: invalid configuration:\n%s\n", e.msg);
		config_free(&cfg);
		return 2;
	}
	char path[PATH_MAX];
	bool created = false;
	/* Claimed like the daemon does: no daemon starts beside it, and none runs while it opens
	 * (and migrates) the database. A daemon that runs made the first key itself at its
	 * start, when the store had none: nothing to do (an upgrade's postinst). */
	int r = store_claim_dir(cfg.state_dir, &e);
	if (r == -EBUSY) {
		printf("sandboxd: a running sandboxd holds %s (its start made a first key when the "
		       "key store had none); none was created\n",
		       cfg.state_dir);
		rc = 0;
	} else if (r < 0 || store_open(cfg.state_dir, &e) < 0 ||
		   auth_init_admin_key(&cfg, path, sizeof(path), &created, &e) < 0) {
		fprintf(stderr, "sandboxd: %s\n", e.msg);
	} else {
		if (created)
			printf("sandboxd: an admin key was created and written to %s (mode 0600)\n",
			       path);
		else
			printf("sandboxd: the key store in %s has keys already; none was created\n",
			       cfg.state_dir);
		rc = 0;
	}
	store_close();
	config_free(&cfg);
	return rc;
}

/* --help, --version, --defaults, --init-admin-key: the exit status, or -1 to serve. */
static int handle_args(int argc, char **argv)
{
	if (argc == 1)
		return -1;
	if (argc == 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)) {
		printf("sandboxd %s\n", SANDBOX_VERSION);
		return 0;
	}
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "--defaults") == 0) {
		config_print_defaults(stdout);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "--init-admin-key") == 0)
		return init_admin_key();
	usage(stderr);
	return 2;
}

/* Raises the descriptor limit to its hard limit: each sandbox holds a few descriptors (its
 * agent's socket, its resolver's two sockets, its pidfd) and each client connection one, so
 * the default soft limit of 1024 would cap the daemon at a few hundred of either. The HTTP
 * layer takes half of what is left after a reserve for its connections (docs/operations.md,
 * "Connections"). */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rlim_t old = rl.rlim_cur;
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
			log_debug("main", "descriptor limit raised from %llu to %llu",
				  (unsigned long long)old, (unsigned long long)rl.rlim_max);
	}
}

/* --- what the cluster needs of the layers above it ------------------------------------ */

static void node_figures(json_t *record)
{
	json_t *names = json_array();
	const struct template_registry *reg = session_templates();
	for (size_t i = 0; reg && i < reg->n; i++)
		json_array_append_new(names, json_string(reg->items[i]->name));
	int64_t mem = session_host_memory_available();
	json_object_set_new(record, "templates", names);
	json_object_set_new(record, "sessions", json_integer((json_int_t)session_count()));
	/* In steps of 64 MiB: a record that changes at every renewal would be written each time. */
	json_object_set_new(record, "memAvailable",
			    json_integer(mem > 0 ? mem & ~(((json_int_t)64 << 20) - 1) : 0));
}

struct each_session {
	void (*fn)(const char *owner, const char *id, const char *preview, const char *template,
		   void *arg);
	void *arg;
};

static void each_session(struct session *s, void *arg)
{
	struct each_session *e = arg;
	e->fn(s->owner, s->id, s->preview_name, s->tmpl ? s->tmpl->name : NULL, e->arg);
}

static void foreach_session(void (*fn)(const char *owner, const char *id, const char *preview,
				       const char *template, void *arg),
			    void *arg)
{
	struct each_session e = { fn, arg };
	session_foreach(NULL, each_session, &e);
}

static json_t *key_row(const char *id, struct err *err)
{
	return keys_row_json(store_db(), id, err);
}

static int key_apply(const json_t *row, struct err *err)
{
	return keys_row_apply(store_db(), row, err);
}

static int key_delete(const char *id, struct err *err)
{
	return keys_delete(store_db(), id, err);
}

static int keys_keep(const char *const *ids, size_t n, struct err *err)
{
	return keys_keep_only(store_db(), ids, n, err);
}

struct each_key {
	void (*fn)(const char *id, void *arg);
	void *arg;
};

static void each_key(const struct key_info *k, void *arg)
{
	struct each_key *e = arg;
	e->fn(k->id, e->arg);
}

static int key_ids(void (*fn)(const char *id, void *arg), void *arg, struct err *err)
{
	struct each_key e = { fn, arg };
	return keys_foreach(store_db(), each_key, &e, err);
}

static const struct cluster_hooks cluster_hooks = {
	.node_figures = node_figures,
	.foreach_session = foreach_session,
	.key_row = key_row,
	.key_apply = key_apply,
	.key_delete = key_delete,
	.keys_keep_only = keys_keep,
	.key_ids = key_ids,
};

/* The HTTP server and its listeners; *ret_port gets the TCP port. daemon_mod.http is set even when
 * a listener fails, for the caller to free. */
static int serve_http(int *ret_port, struct err *err)
{
	daemon_mod.http =
		http_server_new(daemon_mod.base, &daemon_mod.cfg, api_routes, api_nroutes);
	front_init(&daemon_mod.cfg);
	ui_init(&daemon_mod.cfg);
	api_metrics_history_start(daemon_mod.base);
	http_server_set_auth(daemon_mod.http, front_check, NULL);
	http_server_set_host_router(daemon_mod.http, api_host_route, NULL);
	http_server_set_done(daemon_mod.http, on_http_done, NULL);
	metrics_on_scrape(on_scrape_http, NULL);
	int r = http_server_listen_tcp(daemon_mod.http, daemon_mod.cfg.host, daemon_mod.cfg.port,
				       ret_port, err);
	if (r < 0)
		return r;
	if (!daemon_mod.cfg.socket_path)
		return 0;
	r = http_server_listen_unix(daemon_mod.http, daemon_mod.cfg.socket_path, err);
	if (r < 0 || !daemon_mod.cfg.socket_group || !*daemon_mod.cfg.socket_group)
		return r;
	/* The socket is 0660: its group is who may connect (and still present a key). */
	struct group *g = getgrnam(daemon_mod.cfg.socket_group);
	if (!g)
		return err_set(err, ENOENT, "SANDBOX_SOCKET_GROUP: no group `%s`",
			       daemon_mod.cfg.socket_group);
	if (chown(daemon_mod.cfg.socket_path, (uid_t)-1, g->gr_gid) < 0)
		return err_sys(err, errno, "cannot give `%s` to group %s",
			       daemon_mod.cfg.socket_path, daemon_mod.cfg.socket_group);
	return 0;
}

static void announce(int port)
{
	if (strcmp(daemon_mod.cfg.host, "127.0.0.1") != 0 &&
	    strcmp(daemon_mod.cfg.host, "localhost") != 0 &&
	    strcmp(daemon_mod.cfg.host, "::1") != 0)
		log_warn("sandboxd", "listening on %s: reachable from other hosts",
			 daemon_mod.cfg.host);
	log_info("sandboxd", "listening on http://%s:%d%s%s", daemon_mod.cfg.host, port,
		 daemon_mod.cfg.socket_path ? " and " : "",
		 daemon_mod.cfg.socket_path ? daemon_mod.cfg.socket_path : "");
}

/* The daemon serves on `port`: it says so, shows a first start's key, and writes the port
 * file that tells scripts it is up. A failure here stops it as SIGTERM would. */
static void started(int port)
{
	struct err e;
	announce(port);
	api_preview_init(port);
	/* The first start's key, once serving: a start that fails before (a busy port) does
	 * not use up its only showing. Before the port file, which tells scripts it is up. */
	char url[300];
	snprintf(url, sizeof(url), "http://%s:%d", daemon_mod.cfg.host, port);
	/* In a cluster, only the node that began it makes the first key, for every node. */
	bool first_key = !cluster_enabled() || cluster_first_key_is_ours();
	if (first_key &&
	    auth_first_start(&daemon_mod.cfg, url,
			     cluster_enabled() ? cluster_publish_key_now : NULL, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		daemon_mod.exit_code = 1;
		on_stop_signal(SIGTERM, 0, NULL);
	} else if (isatty(STDERR_FILENO)) {
		fprintf(stderr, "sandboxd is serving on %s; Ctrl-C to stop.\n", url);
	}
	/* Where `sandbox keys` finds this daemon when it names none (docs/cli.md): the local
	 * socket when there is one, else the HTTP port (on the loopback when it listens on all
	 * addresses). */
	char local[PATH_MAX + 8];
	if (daemon_mod.cfg.socket_path)
		snprintf(local, sizeof(local), "unix:%s", daemon_mod.cfg.socket_path);
	else if (strcmp(daemon_mod.cfg.host, "0.0.0.0") == 0 ||
		 strcmp(daemon_mod.cfg.host, "::") == 0)
		snprintf(local, sizeof(local), "http://127.0.0.1:%d", port);
	else if (strchr(daemon_mod.cfg.host, ':'))
		snprintf(local, sizeof(local), "http://[%s]:%d", daemon_mod.cfg.host, port);
	else
		snprintf(local, sizeof(local), "%s", url);
	if (store_claim_note_url(local, &e) < 0)
		log_warn("sandboxd", "%s", e.msg);
	if (!daemon_mod.stopping && daemon_mod.cfg.port_file &&
	    write_port_file(daemon_mod.cfg.port_file, port, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		/* Sessions exist now (the warm pool): stop as on SIGTERM. */
		daemon_mod.exit_code = 1;
		on_stop_signal(SIGTERM, 0, NULL);
	}
	if (!daemon_mod.stopping) {
		/* After the port file and the first start's key: ready means ready for clients. */
		char status[512];
		snprintf(status, sizeof(status), "serving on %s%s%s", url,
			 daemon_mod.cfg.socket_path ? " and " : "",
			 daemon_mod.cfg.socket_path ? daemon_mod.cfg.socket_path : "");
		notify_ready(status);
	}
}

/* The signal handlers, before the port file says the daemon is up: a SIGTERM sent as soon as
 * it appears must stop the daemon gracefully, not kill it (the default action). Signals that
 * come before the loop runs wait for it. */
static void catch_signals(void)
{
	daemon_mod.sigterm = evsignal_new(daemon_mod.base, SIGTERM, on_stop_signal, NULL);
	daemon_mod.sigint = evsignal_new(daemon_mod.base, SIGINT, on_stop_signal, NULL);
	daemon_mod.sighup = evsignal_new(daemon_mod.base, SIGHUP, on_sighup, NULL);
	event_add(daemon_mod.sigterm, NULL);
	event_add(daemon_mod.sigint, NULL);
	event_add(daemon_mod.sighup, NULL);
}

/* Runs the event loop until the daemon stops; the signal handlers live exactly as long. */
static void run(void)
{
	event_base_dispatch(daemon_mod.base);
	/* The handlers go away below: a late signal must not kill the process mid-cleanup. */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);

	event_free(daemon_mod.sigterm);
	event_free(daemon_mod.sigint);
	event_free(daemon_mod.sighup);
	if (daemon_mod.grace_timer)
		event_free(daemon_mod.grace_timer);
}

/* A file moves through the daemon in buffers of up to a few MiB (frames of the agent's, the
 * HTTP output): with glibc's defaults, each of them is a fresh mmap, its pages faulted in and
 * zeroed for every request and unmapped after (a third of a 1 MiB read's time here). Kept in
 * the heap instead, and the heap's top kept up to a bound, they are used again. */
#define MALLOC_MMAP_THRESHOLD (4u << 20)
#define MALLOC_TRIM_THRESHOLD (8u << 20)
static void malloc_tune(void)
{
	mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD);
	mallopt(M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD);
}

int main(int argc, char **argv)
{
	int status = handle_args(argc, argv);
	if (status >= 0)
		return status;
	struct err e = { 0 };
	signal(SIGPIPE, SIG_IGN);
	umask(022);
	malloc_tune();

	if (config_load(&daemon_mod.cfg, &e) < 0) {
		fprintf(stderr, "sandboxd: invalid configuration:\n%s\n", e.msg);
		return 2;
	}
	if (!preview_domain_ok(daemon_mod.cfg.public_domain)) {
		fprintf(stderr,
			"sandboxd: invalid configuration:\nSANDBOX_PUBLIC_DOMAIN: `%.100s` is not "
			"a "
			"domain of lowercase DNS labels (a-z, 0-9, '-', dot-separated)\n",
			daemon_mod.cfg.public_domain);
		return 2;
	}
	/* Before anything else touches the state directory (the crash recovery of sessions
	 * would take another live daemon's records for a dead one's). */
	if (store_claim_dir(daemon_mod.cfg.state_dir, &e) < 0) {
		fprintf(stderr, "sandboxd: %s\n", e.msg);
		config_free(&daemon_mod.cfg);
		return 1;
	}
	/* Before any thread: the spawner is a fork of the daemon as it is now (its children
	 * inherit the descriptor limit raised here). Without it, children are cloned by the
	 * daemon's threads, as they were before it. */
	raise_nofile();
	if (spawner_start(&e) < 0)
		log_warn("sandboxd", "%s; children are cloned by the daemon itself", e.msg);
	else
		log_debug("sandboxd", "spawner started (pid %d)", (int)spawner_pid());
	loop_log_libevent();
	evthread_use_pthreads();
	metrics_init();
	metrics_process_init();
	metrics_on_scrape(on_scrape_spawns, NULL);
	publish_config(&daemon_mod.cfg);
	guest_set_violation_hook(on_guest_violation);
	/* A step that fails undoes the ones before it (see the end): a daemon that cannot start
	 * leaves no nftables table, lock, listener or worker behind. */
	int rc = 1;
	daemon_mod.base = event_base_new();
	if (!daemon_mod.base) {
		log_error("sandboxd", "cannot create the event loop");
		goto out_config;
	}
	if (loop_pool_start(daemon_mod.base, daemon_mod.cfg.workers) < 0) {
		log_error("sandboxd", "cannot start worker threads");
		goto out_workers; /* what did start */
	}
	if (store_open(daemon_mod.cfg.state_dir, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		goto out_workers;
	}
	store_set_event_base(daemon_mod.base);
	const struct driver *drv = NULL;
	if (driver_select(&daemon_mod.cfg, &drv, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		goto out_store;
	}
	log_info("sandboxd", "driver %s selected (isolation: %s)", drv->name, drv->isolation);
	/* Before the sessions: the warm pool's first sandboxes need their networks. */
	if (net_init(daemon_mod.base, &daemon_mod.cfg, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		goto out_store;
	}
	api_init(daemon_mod.base, &daemon_mod.cfg, drv->name, drv->isolation);

	if (auth_init(daemon_mod.base, &daemon_mod.cfg, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		goto out_net;
	}
	/* The cluster's keys are in the key store before anyone is served. */
	if (cluster_init(daemon_mod.base, &daemon_mod.cfg, drv->name, drv->isolation,
			 &cluster_hooks, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		cluster_shutdown();
		auth_shutdown();
		goto out_net;
	}
	int port = 0;
	if (serve_http(&port, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		goto out_http;
	}
	if (session_init(daemon_mod.base, &daemon_mod.cfg, drv, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		goto out_http;
	}
	if (cluster_start(port, &e) < 0) {
		log_error("sandboxd", "%s", e.msg);
		daemon_mod.exit_code = 1;
		on_stop_signal(SIGTERM, 0, NULL);
	}
	notify_init(daemon_mod.base);
	catch_signals();
	started(port);

	run();
	notify_free();
	rc = daemon_mod.exit_code;
	if (daemon_mod.cfg.port_file)
		unlink(daemon_mod.cfg.port_file);
	/* Undone in reverse order from wherever starting stopped. The workers go first on every
	 * path (stopping them again is a no-op): a job may still be using the network or the
	 * store. */
out_http:
	loop_pool_stop();
	/* Its threads' last completions run while the HTTP server is there (they answer
	 * requests); what they still write to etcd (the sessions' records going) is written. */
	cluster_shutdown();
	http_server_free(daemon_mod.http);
	cluster_forward_shutdown();
	auth_shutdown();
	front_shutdown();
	api_envd_shutdown();
	ui_shutdown();
	api_metrics_history_stop();
	quota_shutdown();
	volume_shutdown();
	snapshot_shutdown();
out_net:
	loop_pool_stop();
	net_shutdown();
out_store:
	loop_pool_stop();
	store_close();
out_workers:
	loop_pool_stop();
	event_base_free(daemon_mod.base);
out_config:
	spawner_stop();
	config_free(&daemon_mod.cfg);
	metrics_reset();
	return rc;
}
