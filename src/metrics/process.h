/* Process metrics (CPU, memory, fds, start time) refreshed at each scrape. */
#pragma once

void metrics_process_init(void);
