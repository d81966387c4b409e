/* Predicates, if/else, speculations, ternaries and assignments of every kind. */
int n;

syscall::open*:entry,
syscall::close:entry
/execname == "bash" && pid != $pid || uid == 0/
{
	n++;
	n += 2; n -= 1; n *= 3; n /= 2; n %= 7;
	n <<= 1; n >>= 1; n &= 0xff; n |= 0x100; n ^= 1;
	if (n > 100) {
		spec = speculation();
		speculate(spec);
		printf("big %d\n", n);
	} else if (n < 0) {
		n = -n;
	} else
		n = ~n;
	v = !n ^^ (n <= 3) ? n-- : --n;
}

proc:::exec-success
{
	trace(execname);
	stack();
	ustack(5);
	printf("%k", ustack());
}

profile-997hz
/arg1/
{
	@[umod(arg1)] = count();
	@u[usym(arg1)] = count();
}

dtrace:::END
{
	printa("%A %@d\n", @u);
	normalize(@u, 10);
	denormalize(@u);
	setopt("quiet");
	exit(0);
}
