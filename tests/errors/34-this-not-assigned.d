/* expect: this->x has not yet been declared or assigned @ 2:15 */
BEGIN { trace(this->x); }
