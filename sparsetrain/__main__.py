from sparsetrain.cli import main

raise SystemExit(main())
