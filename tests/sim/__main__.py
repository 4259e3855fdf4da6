from tests.sim.scenarios import main

raise SystemExit(main())
