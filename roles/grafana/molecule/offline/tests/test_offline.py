"""The grafana role on a monitor without internet: installed from the controller's .deb (a stand-in for
Grafana's package, molecule.yml), its service enabled and answering, its configuration under the package's
group."""

import configparser


def test_the_host_reaches_no_internet(host):
    assert "default" not in host.check_output("ip route show")


def test_the_package_came_from_the_controllers_deb(host):
    package = host.package("grafana")
    assert package.is_installed and package.version == "0.0.0+standin"


def test_the_service_is_enabled_and_answers(host):
    service = host.service("grafana-server")
    assert service.is_enabled and service.is_running
    fetch = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:3000/').status)"
    answer = host.run(f'python3 -c "{fetch}"')
    assert answer.rc == 0 and answer.stdout.strip() == "200", answer.stderr


def test_the_configuration_belongs_to_the_packages_group(host):
    ini = host.file("/etc/grafana/grafana.ini")
    assert ini.group == "grafana" and ini.mode == 0o640
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(ini.content_string)
    assert parser["server"]["http_addr"] == "127.0.0.1"
