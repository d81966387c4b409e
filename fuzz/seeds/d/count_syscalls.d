#!/usr/sbin/dtrace -s
#pragma D option quiet

pid$target::malloc:entry
{
	@calls[probefunc] = count();
	@bytes["malloc"] = sum(arg0);
	@sizes = quantize(arg0);
}

pid$target::free:entry
/arg0 != 0/
{
	@calls[probefunc] = count();
}

END
{
	printa("%-20s %@10d\n", @calls);
	printa(@bytes);
	trunc(@calls);
}
