#!/usr/bin/env -S udtrace -s
/*
 * Counts timer firings for a second, then prints a distribution and exits.
 * Run: udtrace -s examples/ticks.d
 */
#pragma D option quiet

BEGIN
{
	printf("counting tick-10ms for one second...\n");
	start = timestamp;
}

tick-10ms
{
	n++;
	@ticks["tick-10ms"] = count();
	@gap = quantize(timestamp - start);
	start = timestamp;
}

tick-1s
{
	printf("%d firings\n", n);
	exit(0);
}

END
{
	printa("%-12s %@d\n", @ticks);
}
