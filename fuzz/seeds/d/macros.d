#pragma D option defaultargs

pid$1::$2:entry
/pid == $target && $$3 != ""/
{
	printf("%s called by %d (%s)\n", probefunc, tid, $$3);
	self->depth++;
	@stacks[ustack()] = count();
}

pid$1::$2:return
/self->depth/
{
	self->depth--;
	trace(arg1);
	tracemem(copyin(arg0, 16), 16);
	printf("%s\n", copyinstr(arg0));
}

ERROR
{
	printf("error at %d\n", arg4);
}
