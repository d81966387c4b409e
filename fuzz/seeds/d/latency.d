/* Time spent in a function, per thread. */
#pragma D option bufsize=4m

self uint64_t ts;
int total;

pid$target:libc.so.6:read:entry
{
	self->ts = timestamp;
	self->fd = (int)arg0;
}

pid$target:libc.so.6:read:return
/self->ts/
{
	this->delta = timestamp - self->ts;
	@lat[self->fd] = lquantize(this->delta / 1000, 0, 100, 10);
	@avg = avg(this->delta);
	@mx = max(this->delta);
	@mn = min(this->delta);
	total += this->delta;
	self->ts = 0;
	self->fd = 0;
}

tick-1s
{
	printf("%Y total=%d\n", walltimestamp, total);
	printa(@lat);
	clear(@avg);
}
