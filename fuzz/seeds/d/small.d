BEGIN { trace("hello"); exit(0); }
