/* signame: see signame.h. */
#include "util/signame.h"

#include <signal.h>
#include <stddef.h>
#include <strings.h>

int signal_from_name(const char *name)
{
	static const struct {
		const char *name;
		int sig;
	} sigs[] = {
		{ "HUP", SIGHUP },   { "INT", SIGINT },     { "QUIT", SIGQUIT },
		{ "KILL", SIGKILL }, { "USR1", SIGUSR1 },   { "USR2", SIGUSR2 },
		{ "TERM", SIGTERM }, { "CONT", SIGCONT },   { "STOP", SIGSTOP },
		{ "TSTP", SIGTSTP }, { "WINCH", SIGWINCH }, { "ALRM", SIGALRM },
	};
	if (!name)
		return -1;
	if (strncasecmp(name, "SIG", 3) == 0)
		name += 3;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (strcasecmp(name, sigs[i].name) == 0)
			return sigs[i].sig;
	return -1;
}
