/* client_internal: what the library's files share beyond sandbox.h. */
#pragma once

#include <stddef.h>

#include "sandbox.h"

/* http://host:port (for unix: URLs http://localhost), the socket's path or NULL, the
 * "Authorization: ..." header or NULL, and the Host header's value. */
const char *client_base(const struct client *c);
const char *client_unix_path(const struct client *c);
const char *client_auth_header(const struct client *c);
char *client_host_header(const struct client *c);
/* err for an error reply of `status` whose body is body[0..len). */
int client_http_error(struct err *err, long status, const char *body, size_t len);
