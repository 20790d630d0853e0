from codegen.cli.main import main

main()
