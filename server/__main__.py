from managed_tools.server.cli.command import main

raise SystemExit(main())
