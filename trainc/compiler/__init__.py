"""The compiler: load -> normalize -> validate -> plan -> estimate -> check_fit -> emit -> write."""
