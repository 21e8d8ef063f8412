"""The compiler: load -> normalize -> validate -> plan -> estimate -> check_fit -> emit -> write
(the order is :data:`trainc.compiler.pipeline.PASSES`)."""
