from managed_tools.server.cli import main

raise SystemExit(main())
