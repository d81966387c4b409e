#!/usr/bin/env -S udtrace -s
/*
 * udtrace's main job: a daemon forks workers that exec, and probes placed on the
 * daemon with pid$target follow them into every worker. Each request is counted
 * exactly, per worker, and its latency is measured from entry to return.
 * Run: udtrace -s examples/workers.d -c 'target/release/examples/workerd 4 1000'
 */
#pragma D option quiet

pid$target::worker_main:entry
{
	workers++;
}

pid$target::handle_request:entry
{
	self->start = timestamp;
	@requests[arg0] = count();
}

pid$target::handle_request:return
/self->start/
{
	@latency = quantize(timestamp - self->start);
	@total = count();
	self->start = 0;
}

END
{
	printf("%d workers\n", workers);
	printf("%-8s %8s\n", "WORKER", "REQUESTS");
	printa("%-8d %@8d\n", @requests);
	printa("requests answered: %@d\n", @total);
	printf("handle_request latency (ns):");
	printa(@latency);
}
