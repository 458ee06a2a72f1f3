from icesink.cli.app import main

main()
