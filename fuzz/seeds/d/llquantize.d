#pragma D option aggsortkey
#pragma D option aggsortrev

pid$target:::entry
{
	@a[probemod, probefunc] = llquantize(timestamp % 100000, 10, 0, 6, 20);
	@b = stddev(arg0);
	@c[tid] = count();
}

tick-5sec
{
	printa("%s %s\n%@d\n", @a);
	printa("%d %@d\n", @c);
	printa("%@d\n", @b);
	trunc(@c, 3);
	exit(0);
}
