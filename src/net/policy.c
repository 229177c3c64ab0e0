#include "net/policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "net/dns.h"
#include "util/cleanup.h"

#define RULE_TEXT_MAX 128

static uint32_t prefix_mask(unsigned prefix)
{
	return prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
}

/* Reads a decimal number of at most `max` from *p; advances *p. */
static int read_uint(const char **p, unsigned long max, unsigned long *ret)
{
	const char *s = *p;
	unsigned long v = 0;
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	while (isdigit((unsigned char)*s)) {
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > max)
			return -ERANGE;
		s++;
	}
	*p = s;
	*ret = v;
	return 0;
}

int net_rule_parse(const char *s, struct net_dest_rule *ret, struct err *err)
{
	struct net_dest_rule r = { .prefix = 32, .proto = NET_PROTO_ALL };
	char ip[INET_ADDRSTRLEN];
	const char *p = s;
	size_t n = strcspn(p, "/:");

	if (strchr(s, '[') || (strchr(s, ':') && strchr(strchr(s, ':') + 1, ':')))
		return err_set(
			err, EINVAL,
			"destination rule `%s`: IPv6 destinations are not supported (IPv6 is "
			"disabled inside sandboxes)",
			s);
	if (n == 0 || n >= sizeof(ip))
		return err_set(err, EINVAL, "destination rule `%s`: expected an IPv4 address", s);
	memcpy(ip, p, n);
	ip[n] = '\0';
	struct in_addr a;
	if (inet_pton(AF_INET, ip, &a) != 1)
		return err_set(err, EINVAL, "destination rule `%s`: `%s` is not an IPv4 address", s,
			       ip);
	p += n;

	unsigned long v;
	if (*p == '/' && isdigit((unsigned char)p[1])) {
		p++;
		if (read_uint(&p, 32, &v) < 0)
			return err_set(err, EINVAL,
				       "destination rule `%s`: the prefix length must be 0 to 32",
				       s);
		r.prefix = (uint8_t)v;
	}
	/* Host bits are cleared, as iptables does with the reference's rules. */
	r.addr = ntohl(a.s_addr) & prefix_mask(r.prefix);

	if (*p == ':') {
		p++;
		if (read_uint(&p, 65535, &v) < 0 || v == 0)
			return err_set(err, EINVAL,
				       "destination rule `%s`: a port must be 1 to 65535", s);
		r.port_lo = r.port_hi = (uint16_t)v;
		if (*p == '-') {
			p++;
			if (read_uint(&p, 65535, &v) < 0 || v < r.port_lo)
				return err_set(
					err, EINVAL,
					"destination rule `%s`: a port range must be a-b with "
					"1 <= a <= b <= 65535",
					s);
			r.port_hi = (uint16_t)v;
		}
	}
	if (*p == '/') {
		p++;
		if (strcasecmp(p, "tcp") == 0)
			r.proto = NET_PROTO_TCP;
		else if (strcasecmp(p, "udp") == 0)
			r.proto = NET_PROTO_UDP;
		else if (strcasecmp(p, "all") == 0)
			r.proto = NET_PROTO_ALL;
		else
			return err_set(
				err, EINVAL,
				"destination rule `%s`: the protocol must be tcp, udp or all", s);
		p += strlen(p);
	}
	if (*p)
		return err_set(err, EINVAL,
			       "destination rule `%s`: expected cidr[:port][/tcp|/udp|/all]", s);
	*ret = r;
	return 0;
}

void net_rule_format(const struct net_dest_rule *r, char *buf, size_t len)
{
	struct in_addr a = { .s_addr = htonl(r->addr) };
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &a, ip, sizeof(ip));
	int n = snprintf(buf, len, "%s/%u", ip, r->prefix);
	if (n < 0 || (size_t)n >= len)
		return;
	if (r->port_lo) {
		int m = r->port_lo == r->port_hi
				? snprintf(buf + n, len - (size_t)n, ":%u", r->port_lo)
				: snprintf(buf + n, len - (size_t)n, ":%u-%u", r->port_lo,
					   r->port_hi);
		if (m < 0 || (size_t)(n + m) >= len)
			return;
		n += m;
	}
	snprintf(buf + n, len - (size_t)n, "/%s",
		 r->proto == NET_PROTO_TCP   ? "tcp"
		 : r->proto == NET_PROTO_UDP ? "udp"
					     : "all");
}

bool net_rule_within(const struct net_dest_rule *inner, const struct net_dest_rule *outer)
{
	if (inner->prefix < outer->prefix ||
	    (inner->addr & prefix_mask(outer->prefix)) != outer->addr)
		return false;
	if (outer->proto != NET_PROTO_ALL && inner->proto != outer->proto)
		return false;
	if (outer->port_lo == 0)
		return true;
	return inner->port_lo != 0 && inner->port_lo >= outer->port_lo &&
	       inner->port_hi <= outer->port_hi;
}

/* Calls fn on each trimmed, non-empty item of a comma-separated list. */
static int foreach_item(const char *list, int (*fn)(const char *item, void *arg, struct err *err),
			void *arg, struct err *err)
{
	const char *p = list ? list : "";
	while (*p) {
		size_t n = strcspn(p, ",");
		const char *b = p, *e = p + n;
		while (b < e && isspace((unsigned char)*b))
			b++;
		while (e > b && isspace((unsigned char)e[-1]))
			e--;
		if (e > b) {
			if ((size_t)(e - b) >= RULE_TEXT_MAX + DNS_NAME_MAX)
				return err_set(err, EINVAL, "list item `%.40s...` is too long", b);
			_cleanup_free_ char *item = xcalloc(1, (size_t)(e - b) + 1);
			memcpy(item, b, (size_t)(e - b));
			int r = fn(item, arg, err);
			if (r < 0)
				return r;
		}
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int rules_add(struct net_rules *rs, const char *text, struct err *err)
{
	struct net_dest_rule r;
	int ret = net_rule_parse(text, &r, err);
	if (ret < 0)
		return ret;
	if (rs->n >= NET_POLICY_MAX_RULES)
		return err_set(err, E2BIG, "more than %d destination rules", NET_POLICY_MAX_RULES);
	rs->v = xrealloc(rs->v, (rs->n + 1) * sizeof(*rs->v));
	rs->v[rs->n++] = r;
	return 0;
}

static int rules_add_cb(const char *item, void *arg, struct err *err)
{
	return rules_add(arg, item, err);
}

static void rules_free(struct net_rules *rs)
{
	free(rs->v);
	rs->v = NULL;
	rs->n = 0;
}

int net_rules_parse(const char *list, struct net_rules *ret, struct err *err)
{
	_cleanup_(rules_free) struct net_rules rs = { 0 };
	int r = foreach_item(list, rules_add_cb, &rs, err);
	if (r < 0)
		return r;
	*ret = TAKE_STRUCT(rs);
	return 0;
}

static int names_add(struct net_names *ns, const char *text, struct err *err)
{
	size_t n = strlen(text);
	if (n && text[n - 1] == '.')
		n--;
	_cleanup_free_ char *name = xcalloc(1, n + 1);
	for (size_t i = 0; i < n; i++)
		name[i] = (char)tolower((unsigned char)text[i]);
	const char *rest = strncmp(name, "*.", 2) == 0 ? name + 2 : name;
	if (strlen(rest) > DNS_NAME_MAX || !dns_name_valid(rest))
		return err_set(err, EINVAL,
			       "domain `%s`: expected a name such as example.com or *.example.com",
			       text);
	if (ns->n >= NET_POLICY_MAX_NAMES)
		return err_set(err, E2BIG, "more than %d domains", NET_POLICY_MAX_NAMES);
	ns->v = xrealloc(ns->v, (ns->n + 1) * sizeof(*ns->v));
	ns->v[ns->n++] = TAKE_PTR(name);
	return 0;
}

static int names_add_cb(const char *item, void *arg, struct err *err)
{
	return names_add(arg, item, err);
}

static void names_free(struct net_names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
	ns->v = NULL;
	ns->n = 0;
}

int net_names_parse(const char *list, struct net_names *ret, struct err *err)
{
	_cleanup_(names_free) struct net_names ns = { 0 };
	int r = foreach_item(list, names_add_cb, &ns, err);
	if (r < 0)
		return r;
	*ret = TAKE_STRUCT(ns);
	return 0;
}

bool net_name_within(const char *inner, const char *outer)
{
	bool iw = strncmp(inner, "*.", 2) == 0, ow = strncmp(outer, "*.", 2) == 0;
	if (!ow)
		return !iw && dns_name_match(outer, inner);
	if (!iw)
		return dns_name_match(outer, inner);
	/* *.x.example.com lies within *.example.com, and *.example.com within itself. */
	return strcasecmp(inner + 2, outer + 2) == 0 || dns_name_match(outer, inner + 2);
}

static bool names_match(const struct net_names *ns, const char *name)
{
	for (size_t i = 0; i < ns->n; i++)
		if (dns_name_match(ns->v[i], name))
			return true;
	return false;
}

enum net_dns_verdict net_policy_dns_verdict(const struct net_policy *p, const char *name)
{
	if (names_match(&p->dns_deny, name))
		return NET_DNS_DENIED;
	if (p->dns_allow_only && !names_match(&p->dns_allow, name))
		return NET_DNS_NOT_ALLOWED;
	return NET_DNS_ALLOW;
}

bool net_policy_dns_filtered(const struct net_policy *p)
{
	return p->dns_allow_only || p->dns_deny.n > 0;
}

int net_policy_from_config(const struct config *cfg, struct net_policy *ret, struct err *err)
{
	struct net_policy p = { 0 };
	_cleanup_(names_free) struct net_names names = { 0 };
	_cleanup_(rules_free) struct net_rules rules = { 0 };

	if (net_names_parse(cfg->dns_domains, &names, err) < 0)
		return err_wrap(err, "VM_DNS_DOMAINS");
	if (net_rules_parse(cfg->dest_rules, &rules, err) < 0)
		return err_wrap(err, "VM_DEST_RULES");
	/* Lists of a mode of "none" are dropped. */
	if (cfg->dns_mode == NET_FILTER_ALLOW) {
		p.dns_allow_only = true;
		p.dns_allow = TAKE_STRUCT(names);
	} else if (cfg->dns_mode == NET_FILTER_DENY) {
		p.dns_deny = TAKE_STRUCT(names);
	}
	if (cfg->dest_mode == NET_FILTER_ALLOW) {
		p.dest_allow_only = true;
		p.dest_allow_lifts = true;
		p.dest_allow = TAKE_STRUCT(rules);
	} else if (cfg->dest_mode == NET_FILTER_DENY) {
		p.dest_deny = TAKE_STRUCT(rules);
	}
	p.bw_enabled = cfg->bw_enabled;
	p.bw_rate_kbit = cfg->bw_rate_kbit;
	p.bw_burst_kbit = cfg->bw_burst_kbit;
	*ret = p;
	return 0;
}

static void names_copy(struct net_names *dst, const struct net_names *src)
{
	dst->n = src->n;
	dst->v = src->n ? xcalloc(src->n, sizeof(*dst->v)) : NULL;
	for (size_t i = 0; i < src->n; i++)
		dst->v[i] = xstrdup(src->v[i]);
}

static void rules_copy(struct net_rules *dst, const struct net_rules *src)
{
	dst->n = src->n;
	dst->v = src->n ? xcalloc(src->n, sizeof(*dst->v)) : NULL;
	if (src->n)
		memcpy(dst->v, src->v, src->n * sizeof(*dst->v));
}

void net_policy_copy(struct net_policy *dst, const struct net_policy *src)
{
	*dst = *src;
	names_copy(&dst->dns_allow, &src->dns_allow);
	names_copy(&dst->dns_deny, &src->dns_deny);
	rules_copy(&dst->dest_allow, &src->dest_allow);
	rules_copy(&dst->dest_deny, &src->dest_deny);
}

void net_policy_free(struct net_policy *p)
{
	if (!p)
		return;
	names_free(&p->dns_allow);
	names_free(&p->dns_deny);
	rules_free(&p->dest_allow);
	rules_free(&p->dest_deny);
}

/* --- the override ------------------------------------------------------------------- */

/* Refuses members of obj other than those listed (NULL-terminated). */
static int only_keys(const json_t *obj, const char *where, const char *const *keys, struct err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)obj, k, v) {
		bool known = false;
		for (size_t i = 0; keys[i]; i++)
			known |= strcmp(k, keys[i]) == 0;
		if (!known)
			return err_set(err, EINVAL, "%s: unknown field `%s`", where, k);
	}
	return 0;
}

static int get_mode(const json_t *obj, const char *where, enum net_filter_mode *ret,
		    struct err *err)
{
	json_t *m = json_object_get(obj, "mode");
	*ret = NET_FILTER_NONE;
	if (!m || json_is_null(m))
		return 0;
	const char *s = json_string_value(m);
	if (s && strcmp(s, "allow") == 0)
		*ret = NET_FILTER_ALLOW;
	else if (s && strcmp(s, "deny") == 0)
		*ret = NET_FILTER_DENY;
	else if (!s || strcmp(s, "none") != 0)
		return err_set(err, EINVAL, "%s.mode: expected \"none\", \"allow\" or \"deny\"",
			       where);
	return 0;
}

/* Calls fn on each item of a JSON array of strings or a comma-separated string. */
static int json_list(const json_t *v, const char *where,
		     int (*fn)(const char *item, void *arg, struct err *err), void *arg,
		     struct err *err)
{
	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v))
		return foreach_item(json_string_value(v), fn, arg, err);
	if (!json_is_array(v))
		return err_set(err, EINVAL, "%s: expected an array of strings", where);
	size_t i;
	json_t *item;
	json_array_foreach (v, i, item) {
		const char *s = json_string_value(item);
		if (!s)
			return err_set(err, EINVAL, "%s[%zu]: expected a string", where, i);
		int r = foreach_item(s, fn, arg, err);
		if (r < 0)
			return r;
	}
	return 0;
}

static int merge_dns(struct net_policy *p, const json_t *dns, struct err *err)
{
	static const char *const keys[] = { "mode", "domains", NULL };
	enum net_filter_mode mode;
	_cleanup_(names_free) struct net_names names = { 0 };
	int r;

	if (!json_is_object(dns))
		return err_set(err, EINVAL, "egress.dns: expected an object");
	if ((r = only_keys(dns, "egress.dns", keys, err)) < 0 ||
	    (r = get_mode(dns, "egress.dns", &mode, err)) < 0 ||
	    (r = json_list(json_object_get(dns, "domains"), "egress.dns.domains", names_add_cb,
			   &names, err)) < 0)
		return r;
	if (mode == NET_FILTER_DENY) {
		for (size_t i = 0; i < names.n; i++) {
			if (p->dns_deny.n >= NET_POLICY_MAX_NAMES)
				return err_set(err, E2BIG,
					       "egress.dns.domains: more than %d domains",
					       NET_POLICY_MAX_NAMES);
			p->dns_deny.v = xrealloc(p->dns_deny.v,
						 (p->dns_deny.n + 1) * sizeof(*p->dns_deny.v));
			p->dns_deny.v[p->dns_deny.n++] = TAKE_PTR(names.v[i]);
		}
	} else if (mode == NET_FILTER_ALLOW) {
		for (size_t i = 0; p->dns_allow_only && i < names.n; i++) {
			bool inside = false;
			for (size_t j = 0; j < p->dns_allow.n && !inside; j++)
				inside = net_name_within(names.v[i], p->dns_allow.v[j]);
			if (!inside)
				return err_set(
					err, EINVAL,
					"egress.dns.domains: `%s` is outside the domains the "
					"server allows",
					names.v[i]);
		}
		names_free(&p->dns_allow);
		p->dns_allow = TAKE_STRUCT(names);
		p->dns_allow_only = true;
	}
	return 0;
}

static int merge_dest(struct net_policy *p, const json_t *dest, struct err *err)
{
	static const char *const keys[] = { "mode", "rules", NULL };
	enum net_filter_mode mode;
	_cleanup_(rules_free) struct net_rules rules = { 0 };
	int r;

	if (!json_is_object(dest))
		return err_set(err, EINVAL, "egress.dest: expected an object");
	if ((r = only_keys(dest, "egress.dest", keys, err)) < 0 ||
	    (r = get_mode(dest, "egress.dest", &mode, err)) < 0 ||
	    (r = json_list(json_object_get(dest, "rules"), "egress.dest.rules", rules_add_cb,
			   &rules, err)) < 0)
		return r;
	if (mode == NET_FILTER_DENY) {
		if (p->dest_deny.n + rules.n > NET_POLICY_MAX_RULES)
			return err_set(err, E2BIG, "egress.dest.rules: more than %d rules",
				       NET_POLICY_MAX_RULES);
		p->dest_deny.v =
			xrealloc(p->dest_deny.v, (p->dest_deny.n + rules.n + 1) * sizeof(*rules.v));
		if (rules.n)
			memcpy(p->dest_deny.v + p->dest_deny.n, rules.v,
			       rules.n * sizeof(*rules.v));
		p->dest_deny.n += rules.n;
	} else if (mode == NET_FILTER_ALLOW) {
		for (size_t i = 0; p->dest_allow_only && i < rules.n; i++) {
			bool inside = false;
			for (size_t j = 0; j < p->dest_allow.n && !inside; j++)
				inside = net_rule_within(&rules.v[i], &p->dest_allow.v[j]);
			if (!inside) {
				char text[RULE_TEXT_MAX];
				net_rule_format(&rules.v[i], text, sizeof(text));
				return err_set(
					err, EINVAL,
					"egress.dest.rules: `%s` is outside the destinations the "
					"server allows",
					text);
			}
		}
		/* Within the server's allow list, the rules keep its power to open default-
		 * blocked ranges; otherwise they only narrow what is reachable. */
		p->dest_allow_lifts = p->dest_allow_only && p->dest_allow_lifts;
		p->dest_allow_only = true;
		rules_free(&p->dest_allow);
		p->dest_allow = TAKE_STRUCT(rules);
	}
	return 0;
}

static int get_kbit(const json_t *bw, const char *key, unsigned *ret, struct err *err)
{
	json_t *v = json_object_get(bw, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 100000000)
		return err_set(err, EINVAL,
			       "egress.bandwidth.%s: expected an integer from 1 to 100000000", key);
	*ret = (unsigned)json_integer_value(v);
	return 1;
}

static int merge_bandwidth(struct net_policy *p, const json_t *bw, struct err *err)
{
	static const char *const keys[] = { "rateKbit", "burstKbit", NULL };
	unsigned rate = 0, burst = 0;
	int r;

	if (!json_is_object(bw))
		return err_set(err, EINVAL, "egress.bandwidth: expected an object");
	if ((r = only_keys(bw, "egress.bandwidth", keys, err)) < 0)
		return r;
	int has_rate = get_kbit(bw, "rateKbit", &rate, err);
	if (has_rate < 0)
		return has_rate;
	int has_burst = get_kbit(bw, "burstKbit", &burst, err);
	if (has_burst < 0)
		return has_burst;
	if (!has_rate && !has_burst)
		return 0;
	if (p->bw_enabled && has_rate && rate > p->bw_rate_kbit)
		return err_set(err, EINVAL,
			       "egress.bandwidth.rateKbit: %u exceeds the server's limit of %u",
			       rate, p->bw_rate_kbit);
	if (p->bw_enabled && has_burst && burst > p->bw_burst_kbit)
		return err_set(err, EINVAL,
			       "egress.bandwidth.burstKbit: %u exceeds the server's limit of %u",
			       burst, p->bw_burst_kbit);
	if (!p->bw_enabled && !has_rate)
		return err_set(err, EINVAL,
			       "egress.bandwidth: rateKbit is required (the server sets no limit)");
	p->bw_enabled = true;
	if (has_rate)
		p->bw_rate_kbit = rate;
	if (has_burst)
		p->bw_burst_kbit = burst;
	return 0;
}

int net_policy_merge(const struct net_policy *server, const json_t *override,
		     struct net_policy *ret, struct err *err)
{
	static const char *const keys[] = { "dns", "dest", "bandwidth", NULL };
	_cleanup_(net_policy_free) struct net_policy p = { 0 };
	json_t *v;
	int r;

	net_policy_copy(&p, server);
	if (!override || json_is_null(override)) {
		*ret = TAKE_STRUCT(p);
		return 0;
	}
	if (!json_is_object(override))
		return err_set(err, EINVAL, "egress: expected an object");
	if ((r = only_keys(override, "egress", keys, err)) < 0)
		return r;
	if ((v = json_object_get(override, "dns")) && !json_is_null(v) &&
	    (r = merge_dns(&p, v, err)) < 0)
		return r;
	if ((v = json_object_get(override, "dest")) && !json_is_null(v) &&
	    (r = merge_dest(&p, v, err)) < 0)
		return r;
	if ((v = json_object_get(override, "bandwidth")) && !json_is_null(v) &&
	    (r = merge_bandwidth(&p, v, err)) < 0)
		return r;
	*ret = TAKE_STRUCT(p);
	return 0;
}

/* --- names for logs, metrics and chains ----------------------------------------------- */

static void append(char **buf, size_t *len, size_t *cap, const char *s)
{
	size_t n = strlen(s);
	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		*buf = xrealloc(*buf, *cap);
	}
	memcpy(*buf + *len, s, n + 1);
	*len += n;
}

static void append_rules(char **buf, size_t *len, size_t *cap, const struct net_rules *rs)
{
	char text[RULE_TEXT_MAX];
	for (size_t i = 0; i < rs->n; i++) {
		net_rule_format(&rs->v[i], text, sizeof(text));
		append(buf, len, cap, i ? "," : "");
		append(buf, len, cap, text);
	}
}

char *net_policy_dest_key(const struct net_policy *p)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	append(&buf, &len, &cap, p->dest_allow_only ? "only" : "any");
	append(&buf, &len, &cap, p->dest_allow_lifts ? " lifts" : "");
	append(&buf, &len, &cap, p->dns_allow_only ? " dns-allow" : "");
	append(&buf, &len, &cap, net_policy_dns_filtered(p) ? " dns-filtered" : "");
	append(&buf, &len, &cap, " allow=");
	append_rules(&buf, &len, &cap, &p->dest_allow);
	append(&buf, &len, &cap, " deny=");
	append_rules(&buf, &len, &cap, &p->dest_deny);
	return buf;
}

const char *net_policy_dns_mode(const struct net_policy *p)
{
	return p->dns_allow_only ? "allow" : p->dns_deny.n ? "deny" : "none";
}

const char *net_policy_dest_mode(const struct net_policy *p)
{
	return p->dest_allow_only ? "allow" : p->dest_deny.n ? "deny" : "none";
}
